"""The Jina search count is a pydantic model with the same accepted values and 400 messages as before."""
import pytest

from kit.serve._http import ServiceError
from kit.serve.jina import SEARCH_MAX, JinaSearchRequest, search_request


def _old_count(raw):
    """The hand-written parse this model replaced (kept here as the reference)."""
    try:
        n = int(raw)
        if isinstance(raw, bool) or str(raw).strip() != str(n):
            raise ValueError
    except (TypeError, ValueError):
        raise ServiceError(400, f"num must be an integer from 1 to {SEARCH_MAX}, got {raw!r}") from None
    if not 1 <= n <= SEARCH_MAX:
        raise ServiceError(400, f"num must be from 1 to {SEARCH_MAX}, got {n}")
    return n


@pytest.mark.parametrize("raw", [1, 5, 10, "3", " 7 ", 0, 11, -1, "05", "+5", "5.0", 5.0, 2.5, True, False,
                                 None, "", "x", [], {}, "1e1", 10**30])
def test_count_matches_hand_parse(raw):
    try:
        want = ("ok", _old_count(raw))
    except ServiceError as e:
        want = ("err", e.status, str(e))
    try:
        got = ("ok", JinaSearchRequest.of(raw).num)
    except ServiceError as e:
        got = ("err", e.status, str(e))
    assert got == want


def test_search_request_uses_model():
    assert search_request("", {"q": "x", "count": "4"}) == ("x", 4)
    with pytest.raises(ServiceError, match="num must be from 1 to 10, got 11"):
        search_request("x", {"num": 11})
