"""An in-process stand-in for the Hugging Face Hub's HTTP API, for offline tests and rehearsals.

``huggingface_hub`` sends every request through one HTTP client made by a factory that the library
lets callers replace (:func:`huggingface_hub.set_client_factory`). :class:`LocalHub` is such a
client's transport: it serves the subset of the Hub API that :mod:`kit.hub.publish` and
:mod:`kit.hub.download` use (create repo, preupload, commit, tag, refs, revision info, tree,
resolve), stores repositories in a local folder, and records every request. Nothing leaves the
process, so publishing and downloading can be checked end to end without the network; the real Hub
is checked by hand (README "Publishing and downloading").

Why not a library: the Hub has no offline server, and ``huggingface_hub``'s own test suite talks to
a staging Hub. The layout under ``root``::

    <repo_type>s/<owner>/<name>/blobs/<sha256>          file contents, content-addressed
    <repo_type>s/<owner>/<name>/commits/<sha1>.json     {"parent", "message", "files": {path: sha256}}
    <repo_type>s/<owner>/<name>/refs.json               {"branches": {"main": sha1}, "tags": {...}}
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import httpx2

_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}


@dataclass
class RecordedRequest:
    """One request the hub received (the token itself is kept in memory only, for assertions)."""

    method: str
    url: str
    path: str
    authorization: str | None
    body_bytes: int


def git_blob_sha1(data: bytes) -> str:
    """Git's object id of a blob (what the Hub reports as ``oid`` / ETag of a regular file)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


class LocalHub:
    """A local Hub API server as an ``httpx2`` transport.

    Args:
        root: storage folder (created).
        require_token_for_writes: answer 401 to writes without an ``Authorization`` header, like the Hub.
        clock: the commit time (seconds) hashed into each commit id; a constant makes the ids content-derived,
            so two hubs fed the same files give the same commits (the preflight's stand-in Hub).

    Use :meth:`installed` to route ``huggingface_hub`` through it for the duration of a block.
    """

    def __init__(self, root: str | Path, *, require_token_for_writes: bool = True,
                 clock: Callable[[], float] = time.time):
        self.root = Path(root)
        self.clock = clock
        self.root.mkdir(parents=True, exist_ok=True)
        self.require_token = require_token_for_writes
        self.requests: list[RecordedRequest] = []

    # ------------------------------------------------------------------ storage
    def _repo_dir(self, repo_type: str, repo_id: str) -> Path:
        if repo_id.count("/") != 1 or ".." in repo_id:
            raise ValueError(f"bad repo id {repo_id!r}")
        return self.root / f"{repo_type}s" / repo_id

    def _refs(self, d: Path) -> dict:
        return json.loads((d / "refs.json").read_text())

    def _write_refs(self, d: Path, refs: dict) -> None:
        (d / "refs.json").write_text(json.dumps(refs, indent=1, sort_keys=True))

    def _resolve(self, d: Path, revision: str) -> str | None:
        refs = self._refs(d)
        rev = unquote(revision)
        if rev in refs["branches"]:
            return refs["branches"][rev]
        if rev in refs["tags"]:
            return refs["tags"][rev]
        return rev if (d / "commits" / f"{rev}.json").exists() else None

    def _commit(self, d: Path, sha: str) -> dict:
        return json.loads((d / "commits" / f"{sha}.json").read_text())

    def files(self, repo_type: str, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        """``{path: content}`` of a repository at ``revision`` (for assertions).

        Raises:
            KeyError: unknown repository or revision.
        """
        d = self._repo_dir(repo_type, repo_id)
        if not d.exists():
            raise KeyError(f"no {repo_type} repo {repo_id}")
        sha = self._resolve(d, revision)
        if sha is None:
            raise KeyError(f"{repo_id}: no revision {revision}")
        return {p: (d / "blobs" / h).read_bytes() for p, h in self._commit(d, sha)["files"].items()}

    def refs(self, repo_type: str, repo_id: str) -> dict:
        """``{"branches": {...}, "tags": {...}}`` of a repository."""
        return self._refs(self._repo_dir(repo_type, repo_id))

    # ------------------------------------------------------------------ transport
    def handle(self, request: httpx2.Request) -> httpx2.Response:
        """Serve one request (the ``httpx2.MockTransport`` handler)."""
        body = request.read()
        self.requests.append(RecordedRequest(request.method, str(request.url), request.url.path,
                                             request.headers.get("authorization"), len(body)))
        try:
            return self._route(request, body)
        except KeyError as e:
            return self._error(404, str(e), "RepoNotFound" if "repo" in str(e) else "RevisionNotFound")

    def _error(self, status: int, msg: str, code: str | None = None) -> httpx2.Response:
        headers = {"X-Error-Message": msg}
        if code:
            headers["X-Error-Code"] = code
        return httpx2.Response(status, json={"error": msg}, headers=headers)

    def _route(self, request: httpx2.Request, body: bytes) -> httpx2.Response:
        parts = [unquote(p) for p in request.url.raw_path.decode().split("?")[0].strip("/").split("/")]
        m = request.method
        writes = m in ("POST", "PUT", "DELETE")
        if writes and self.require_token and not request.headers.get("authorization"):
            return self._error(401, "Invalid credentials in Authorization header")
        if parts[:3] == ["api", "repos", "create"] and m == "POST":
            return self._create(json.loads(body))
        if parts[:2] == ["api", "validate-yaml"] and m == "POST":
            return self._validate_yaml(json.loads(body)["content"])
        if parts[0] == "api" and len(parts) >= 5 and parts[1] in _TYPES:
            rtype, repo_id, op, rest = _TYPES[parts[1]], f"{parts[2]}/{parts[3]}", parts[4], parts[5:]
            d = self._repo_dir(rtype, repo_id)
            if not d.exists():
                raise KeyError(f"repo {repo_id} not found")
            if op == "preupload" and m == "POST":
                files = json.loads(body)["files"]
                return httpx2.Response(200, json={"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                                            for f in files], "commitOid": None})
            if op == "commit" and m == "POST":
                return self._do_commit(d, repo_id, rtype, "/".join(rest), body)
            if op == "tag" and m == "POST":
                return self._tag(d, "/".join(rest), json.loads(body))
            if op == "refs" and m == "GET":
                refs = self._refs(d)
                return httpx2.Response(200, json={
                    "branches": [{"name": k, "ref": f"refs/heads/{k}", "targetCommit": v} for k, v in refs["branches"].items()],
                    "tags": [{"name": k, "ref": f"refs/tags/{k}", "targetCommit": v} for k, v in refs["tags"].items()],
                    "converts": []})
            if op == "revision" and m == "GET":
                return self._info(d, repo_id, rtype, "/".join(rest))
            if op == "tree" and m == "GET":
                return self._tree(d, rest[0] if rest else "main", "/".join(rest[1:]))
        if parts[0] == "api" and len(parts) == 4 and parts[1] in _TYPES and m == "GET":
            return self._info(self._repo_dir(_TYPES[parts[1]], f"{parts[2]}/{parts[3]}"), f"{parts[2]}/{parts[3]}",
                              _TYPES[parts[1]], "main")
        # file download: [datasets|spaces/]owner/name/resolve/<rev>/<path>
        rtype = "model"
        if parts[0] in ("datasets", "spaces"):
            rtype, parts = _TYPES[parts[0]], parts[1:]
        if len(parts) >= 5 and parts[2] == "resolve" and m in ("GET", "HEAD"):
            return self._resolve_file(self._repo_dir(rtype, f"{parts[0]}/{parts[1]}"), parts[3], "/".join(parts[4:]), m)
        return self._error(404, f"local hub: no route for {m} {request.url.path}")

    def _create(self, payload: dict) -> httpx2.Response:
        name = payload["name"]
        repo_id = f"{payload['organization']}/{name}" if payload.get("organization") else name
        rtype = payload.get("type") or "model"
        d = self._repo_dir(rtype, repo_id)
        url = f"https://huggingface.co/{'' if rtype == 'model' else rtype + 's/'}{repo_id}"
        if d.exists():
            return httpx2.Response(409, json={"error": "You already created this repo", "url": url})
        (d / "blobs").mkdir(parents=True)
        (d / "commits").mkdir()
        # the Hub starts every repo with an initial commit holding .gitattributes
        ga = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.sqlite filter=lfs diff=lfs merge=lfs -text\n"
        files = {".gitattributes": self._store(d, ga)}
        sha = self._new_commit(d, None, "initial commit", files)
        self._write_refs(d, {"branches": {"main": sha}, "tags": {}, "private": bool(payload.get("private"))})
        return httpx2.Response(200, json={"url": url, "name": repo_id, "id": repo_id})

    def _validate_yaml(self, content: str) -> httpx2.Response:
        """The card's metadata block must be a YAML mapping (the Hub checks more: its schema)."""
        import yaml

        if not content.startswith("---"):
            return httpx2.Response(200, json={"warnings": [{"message": "empty or missing yaml metadata"}]})
        block = content.split("---", 2)[1]
        try:
            meta = yaml.safe_load(block)
        except yaml.YAMLError as e:
            return httpx2.Response(400, json={"errors": [{"message": f"invalid YAML: {e}"}]})
        if not isinstance(meta, dict):
            return httpx2.Response(400, json={"errors": [{"message": "metadata is not a mapping"}]})
        return httpx2.Response(200, json={"warnings": []})

    def _store(self, d: Path, data: bytes) -> str:
        h = hashlib.sha256(data).hexdigest()
        (d / "blobs" / h).write_bytes(data)
        return h

    def _new_commit(self, d: Path, parent: str | None, message: str, files: dict[str, str]) -> str:
        blob = json.dumps({"parent": parent, "message": message, "files": files, "time": self.clock()}, sort_keys=True)
        sha = hashlib.sha1(blob.encode()).hexdigest()
        (d / "commits" / f"{sha}.json").write_text(blob)
        return sha

    def _do_commit(self, d: Path, repo_id: str, rtype: str, revision: str, body: bytes) -> httpx2.Response:
        refs = self._refs(d)
        branch = unquote(revision) or "main"
        if branch not in refs["branches"]:
            raise KeyError(f"{repo_id}: no branch {branch}")
        parent = refs["branches"][branch]
        files = dict(self._commit(d, parent)["files"])
        message = ""
        for line in body.decode().splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                message = value.get("summary", "")
                if value.get("parentCommit") and value["parentCommit"] != parent:
                    return self._error(412, "parent commit is not the head of the branch")
            elif key == "file":
                if value.get("encoding") != "base64":
                    return self._error(400, f"unsupported encoding {value.get('encoding')}")
                files[value["path"]] = self._store(d, base64.b64decode(value["content"]))
            elif key == "deletedFile":
                files.pop(value["path"], None)
            else:
                return self._error(400, f"local hub: unsupported commit operation {key!r} (LFS is not emulated)")
        sha = self._new_commit(d, parent, message, files)
        refs["branches"][branch] = sha
        self._write_refs(d, refs)
        prefix = "" if rtype == "model" else f"{rtype}s/"
        return httpx2.Response(200, json={"commitUrl": f"https://huggingface.co/{prefix}{repo_id}/commit/{sha}",
                                          "commitOid": sha, "pullRequestUrl": None, "success": True})

    def _tag(self, d: Path, revision: str, payload: dict) -> httpx2.Response:
        sha = self._resolve(d, revision or "main")
        if sha is None:
            raise KeyError(f"no revision {revision}")
        refs = self._refs(d)
        if payload["tag"] in refs["tags"]:
            return self._error(409, f"tag {payload['tag']} already exists")
        refs["tags"][payload["tag"]] = sha
        self._write_refs(d, refs)
        return httpx2.Response(200, json={"success": True})

    def _info(self, d: Path, repo_id: str, rtype: str, revision: str) -> httpx2.Response:
        if not d.exists():
            raise KeyError(f"repo {repo_id} not found")
        sha = self._resolve(d, revision or "main")
        if sha is None:
            raise KeyError(f"{repo_id}: no revision {revision}")
        files = self._commit(d, sha)["files"]
        info = {"id": repo_id, "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24], "sha": sha,
                "private": self._refs(d).get("private", False),
                "siblings": [{"rfilename": p} for p in sorted(files)], "tags": [], "lastModified": "2026-01-01T00:00:00.000Z"}
        if rtype == "model":
            info["modelId"] = repo_id
        return httpx2.Response(200, json=info)

    def _tree(self, d: Path, revision: str, prefix: str) -> httpx2.Response:
        sha = self._resolve(d, revision)
        if sha is None:
            raise KeyError(f"no revision {revision}")
        out, dirs = [], set()
        for p, h in sorted(self._commit(d, sha)["files"].items()):
            if prefix and not p.startswith(prefix.rstrip("/") + "/"):
                continue
            data = (d / "blobs" / h).read_bytes()
            parts = p.split("/")
            for i in range(1, len(parts)):
                dirs.add("/".join(parts[:i]))
            out.append({"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": p})
        out += [{"type": "directory", "oid": hashlib.sha1(x.encode()).hexdigest(), "size": 0, "path": x} for x in sorted(dirs)]
        return httpx2.Response(200, json=out)

    def _resolve_file(self, d: Path, revision: str, path: str, method: str) -> httpx2.Response:
        if not d.exists():
            raise KeyError(f"repo {d.relative_to(self.root)} not found")
        sha = self._resolve(d, revision)
        if sha is None:
            raise KeyError(f"no revision {revision}")
        files = self._commit(d, sha)["files"]
        if path not in files:
            return self._error(404, f"{path} not found", "EntryNotFound")
        data = (d / "blobs" / files[path]).read_bytes()
        headers = {"X-Repo-Commit": sha, "ETag": f'"{git_blob_sha1(data)}"', "Content-Length": str(len(data))}
        return httpx2.Response(200, headers=headers, content=b"" if method == "HEAD" else data)

    # ------------------------------------------------------------------ installation
    def client_factory(self) -> httpx2.Client:
        """A ``huggingface_hub``-style client whose transport is this hub."""
        from huggingface_hub.utils._http import hf_request_event_hook

        return httpx2.Client(transport=httpx2.MockTransport(self.handle), event_hooks={"request": [hf_request_event_hook]},
                             follow_redirects=True, timeout=None)

    @contextlib.contextmanager
    def installed(self):
        """Route every ``huggingface_hub`` request to this hub inside the block (the library's
        supported ``set_client_factory`` hook), with the snapshot cache under ``root/hf_cache``: files of
        this hub are stored under real-looking repository ids and must never reach the user's Hugging Face
        cache (an offline run would read them later). The default client and cache are restored afterwards."""
        import huggingface_hub
        import huggingface_hub.constants as hf_constants
        from huggingface_hub.utils._http import default_client_factory

        cache = hf_constants.HF_HUB_CACHE
        hf_constants.HF_HUB_CACHE = str(self.root / "hf_cache")
        huggingface_hub.set_client_factory(self.client_factory)
        try:
            yield self
        finally:
            huggingface_hub.set_client_factory(default_client_factory)
            hf_constants.HF_HUB_CACHE = cache
