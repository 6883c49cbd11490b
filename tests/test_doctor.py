"""``python -m kit.cli doctor``: one line per check, a non-zero exit on any failure."""

from __future__ import annotations

from models_server import closed_port_url, models_server

from kit import doctor
from kit.cli import main


def test_endpoint_check_names_the_problem():
    with models_server(["served-a"]) as url:
        ok = doctor.check_endpoint(url, "served-a")
        wrong = doctor.check_endpoint(url, "mine")
    assert ok.status == "ok" and "serves 'served-a'" in ok.detail
    assert wrong.status == "FAIL" and "does not serve model 'mine'; it serves ['served-a']" in wrong.detail
    dead = doctor.check_endpoint(closed_port_url(), "m")
    assert dead.status == "FAIL" and "unreachable" in dead.detail
    assert doctor.check_endpoint("", "").status == "skip"


def test_zim_check(tmp_path, data_dir):
    bad = tmp_path / "bad.zim"
    bad.write_bytes(b"not a zim archive")
    real = sorted((data_dir / "zim").glob("*.zim"))[0]
    got = doctor.check_zims([real, bad])
    assert [c.status for c in got] == ["ok", "FAIL"] and "articles" in got[0].detail
    assert str(bad) in got[1].detail and "libzim" in got[1].detail
    assert doctor.check_zims([tmp_path / "missing.zim"])[0].status == "FAIL"


def test_sandbox_rlimits_fallback_and_fonts(monkeypatch, tmp_path):
    c = doctor.check_sandbox("rlimits")
    assert c.status == "ok" and c.detail.startswith("rlimits"), c
    assert doctor.check_fonts(str(tmp_path / "nope.ttf")).status == "FAIL"
    import kit.vfold.fonts as fonts

    monkeypatch.setattr(fonts, "fallback_faces", lambda explicit=None: ())  # a machine without a CJK font
    c = doctor.check_fonts()
    assert c.status == "FAIL" and "CJK" in c.detail and "fonts-noto-cjk" in c.detail


def test_doctor_command_exit_code_and_lines(tmp_path, capsys):
    bad = tmp_path / "bad.zim"
    bad.write_bytes(b"junk")
    with models_server(["other"]) as url:
        rc = main(["doctor", "--endpoint", url, "--model", "mine", "--zim", str(bad), "--isolation", "rlimits"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 1
    by = {line.split()[1]: line.split()[0] for line in out if not line.startswith("doctor:")}
    assert by == {"endpoint": "FAIL", "zim": "FAIL", "tokenizer": "ok", "sandbox": "ok", "fonts": by["fonts"]}
    failed = [name for name, status in by.items() if status == "FAIL"]  # fonts: FAIL on a machine without CJK fonts
    assert out[-1] == f"doctor: {len(failed)} check(s) failed: {', '.join(failed)}"


def test_doctor_passes_when_everything_is_there(data_dir, capsys):
    with models_server(["m"]) as url:
        rc = main(["doctor", "--endpoint", url, "--model", "m", "--isolation", "rlimits"])
    out = capsys.readouterr().out
    fonts_ok = "ok   fonts" in out
    assert (rc == 0) == fonts_ok and "ok   endpoint" in out and "ok   zim" in out and "ok   sandbox" in out


def test_doctor_fails_a_named_model_that_is_not_a_checkpoint_folder(tmp_path):
    from kit.doctor import check_endpoint

    bad = check_endpoint(None, "foo")
    assert bad.status == "FAIL" and "not a local checkpoint folder" in bad.detail
    (tmp_path / "config.json").write_text("{}")
    assert check_endpoint(None, str(tmp_path)).status == "ok"
    assert check_endpoint(None, "tiny-qwen2_vl").status == "skip"


def test_doctor_invalid_url_and_unknown_tiny_arch_fail_in_one_line(capsys):
    """An invalid endpoint URL is a FAIL line, not a traceback (C12); tiny-bogus is no model (C13)."""
    rc = main(["doctor", "--endpoint", "http://[::1", "--model", "m", "--zim", "/no/such.zim", "--isolation", "rlimits"])
    out = capsys.readouterr().out
    assert rc == 1 and "FAIL endpoint" in out and "invalid URL" in out
    bad = doctor.check_endpoint(None, "tiny-bogus")
    assert bad.status == "FAIL" and "no tiny architecture 'bogus'" in bad.detail and "tiny-qwen2_vl" in bad.detail
    assert doctor.check_endpoint(None, "tiny-qwen3_vl").status == "skip"
