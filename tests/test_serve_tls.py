"""serve-web over TLS (issue 28 part 3): ``--ssl-certfile`` / ``--ssl-keyfile`` (bad files: one line, exit 2,
before any archive is opened), ``--make-certs DIR`` (a local CA and a certificate for google.serper.dev,
r.jina.ai, s.jina.ai and loopback, the /etc/hosts line and the client variables), checked with clients that
verify certificates (httpx, the ssl module, curl, requests, Node) against the real command
(``python -m kit.cli serve-web ... --ssl-certfile ...``, uvicorn in a subprocess on a loopback port).

/etc/hosts cannot be edited here, so clients connect to 127.0.0.1 while sending the real host name as TLS
SNI and ``Host`` (httpx's ``sni_hostname`` extension, ``ssl.wrap_socket(server_hostname=...)``,
``curl --resolve``): what the certificate is checked against is the real host name, as with a hosts line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from kit.serve.tls import DEFAULT_CERT_NAMES, REAL_HOSTS, check_tls_files, make_certs, route_by_host

ROOT = Path(__file__).resolve().parents[1]
FRENCH = "wikipedia_fr_test_2017-07"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _handshake(port: int, server_hostname: str, context: ssl.SSLContext) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=server_hostname) as tls:
            return tls.getpeercert()


def _ca_context(certs) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT  # RFC 5280 conformance, the default of Python 3.13+
    return ctx


@pytest.fixture(scope="module")
def tls_server(data_dir, certs, tmp_path_factory):
    """``python -m kit.cli serve-web <French archive> --ssl-certfile ... --ssl-keyfile ...`` on a free
    loopback port; yields the port."""
    zim = data_dir / "zim" / f"{FRENCH}.zim"
    if not zim.exists():
        pytest.skip(f"shared ZIM archive missing: {zim}")
    port = _free_port()
    log = tmp_path_factory.mktemp("serve_tls") / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kit.cli", "serve-web", str(zim), "--port", str(port),
                                 "--cache-mode", "off", "--ssl-certfile", str(certs.cert), "--ssl-keyfile",
                                 str(certs.key), "--public-url", "https://google.serper.dev"],
                                cwd=str(ROOT), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                _handshake(port, "localhost", _ca_context(certs))
                break
            except OSError:
                assert time.monotonic() < deadline, f"serve-web did not start: {log.read_text()}"
                time.sleep(0.25)
        assert f"on https://127.0.0.1:{port}" in log.read_text()
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _as(host: str, port: int, path: str) -> tuple[str, dict]:
    """URL and request options that reach 127.0.0.1:port as ``https://host/path`` would with a hosts line."""
    return f"https://127.0.0.1:{port}{path}", {"headers": {"Host": host}, "extensions": {"sni_hostname": host}}


# ============================================================================ the real host names over TLS
def test_https_with_the_real_host_names(tls_server, certs):
    port = tls_server

    def client(**kw) -> httpx.Client:
        # one client (one connection pool) per host name: a pooled connection to 127.0.0.1 would be reused
        # for another name without a new handshake
        return httpx.Client(verify=_ca_context(certs), timeout=30, **kw)

    with client() as c:
        url, kw = _as("google.serper.dev", port, "/search")
        r = c.post(url, json={"q": "Warrington", "num": 2}, **kw)
        assert r.status_code == 200, r.text
        link = r.json()["organic"][0]["link"]
        assert link.startswith(f"https://google.serper.dev/zim/{FRENCH}/")  # --public-url: the real host's links
        url, kw = _as("google.serper.dev", port, "/images")
        images = c.post(url, json={"q": "Orbite héliosynchrone", "num": 1}, **kw).json()["images"]
        assert images[0]["imageUrl"].startswith("https://google.serper.dev/zim/")
        url, kw = _as("google.serper.dev", port, images[0]["imageUrl"].removeprefix("https://google.serper.dev"))
        got = c.get(url, **kw)
        assert got.status_code == 200 and got.headers["content-type"].startswith("image/")

    with client() as c:  # Jina's reader takes the page URL as the whole path: https://r.jina.ai/<url>
        url, kw = _as("r.jina.ai", port, f"/{link}")
        page = c.get(url, **kw)
        assert page.status_code == 200 and page.text.startswith("Title: Warrington")
        data = c.get(url, headers={**kw["headers"], "Accept": "application/json"},
                     extensions=kw["extensions"]).json()["data"]
        assert data["url"] == link
        # archive entries the answers link to are served under every name (images in reader Markdown)
        url, kw = _as("r.jina.ai", port, link.removeprefix("https://google.serper.dev"))
        assert c.get(url, **kw).status_code == 200

    with client() as c:  # s.jina.ai: the certificate holds it; the request reaches the service's /s route
        url, kw = _as("s.jina.ai", port, "/Warrington")
        r = c.get(url, **kw)
        assert r.status_code == 200 or "/s/Warrington" in r.json()["message"], r.text

    # verification is real: another name, or the public trust store, is refused
    with client() as c, pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED|match"):
        url, kw = _as("api.example.org", port, "/health")
        c.get(url, **kw)
    with httpx.Client(timeout=30) as public, pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        url, kw = _as("google.serper.dev", port, "/health")
        public.get(url, **kw)
    with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port is no answer
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)


def test_ssl_module_validates_every_certificate_name(tls_server, certs):
    ctx = _ca_context(certs)
    for name in DEFAULT_CERT_NAMES[:-1]:  # the three real hosts, localhost, 127.0.0.1 (the server listens on v4)
        peer = _handshake(tls_server, name, ctx)
        sans = {v for _k, v in peer["subjectAltName"]}
        assert name in sans
    with pytest.raises(ssl.SSLCertVerificationError, match="match|mismatch"):
        _handshake(tls_server, "google.com", ctx)
    with pytest.raises(ssl.SSLCertVerificationError):  # the system's CAs alone do not know the local CA
        _handshake(tls_server, "google.serper.dev", ssl.create_default_context())


def test_printed_variables_make_clients_trust_the_ca(tls_server, certs, monkeypatch):
    port = tls_server
    env = certs.env_vars()
    # httpx (trust_env): SSL_CERT_FILE
    monkeypatch.setenv("SSL_CERT_FILE", env["SSL_CERT_FILE"])
    with httpx.Client(timeout=30) as c:
        url, kw = _as("google.serper.dev", port, "/search")
        assert c.post(url, json={"q": "Warrington"}, **kw).status_code == 200
    monkeypatch.delenv("SSL_CERT_FILE")
    base_env = {k: v for k, v in os.environ.items() if k not in env}
    # the ssl module's default context (urllib, aiohttp, ...): SSL_CERT_FILE, in a fresh interpreter
    code = ("import socket, ssl, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])));"
            "t = ssl.create_default_context().wrap_socket(s, server_hostname='r.jina.ai'); print(t.version())")
    run = subprocess.run([sys.executable, "-c", code, str(port)], env=base_env | {"SSL_CERT_FILE": env["SSL_CERT_FILE"]},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.startswith("TLS"), run.stderr
    run = subprocess.run([sys.executable, "-c", code, str(port)], env=base_env, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in run.stderr  # without it: refused
    # the bundle keeps the system's public CAs: it is the system bundle plus the local CA
    assert certs.bundle.read_bytes().endswith(certs.ca.read_bytes())
    assert certs.bundle.read_bytes().count(b"BEGIN CERTIFICATE") > 1 or not Path("/etc/ssl/certs/ca-certificates.crt").exists()

    requests = pytest.importorskip("requests")  # REQUESTS_CA_BUNDLE (requests cannot send another SNI: by IP)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", env["REQUESTS_CA_BUNDLE"])
    assert requests.get(f"https://127.0.0.1:{port}/health", timeout=30).json()["status"] == "ok"
    monkeypatch.delenv("REQUESTS_CA_BUNDLE")

    curl = shutil.which("curl")
    if curl:  # the docs' check, as written, with --resolve standing in for the hosts line
        resolve = [a for h in REAL_HOSTS for a in ("--resolve", f"{h}:{port}:127.0.0.1")]
        body = json.dumps({"q": "Warrington", "num": 1})
        run = subprocess.run([curl, "-sS", "--fail", *resolve, "--cacert", str(certs.ca),
                              f"https://google.serper.dev:{port}/search", "-H", "Content-Type: application/json",
                              "-d", body], capture_output=True, text=True, timeout=60, env=base_env)
        assert run.returncode == 0 and json.loads(run.stdout)["organic"], run.stderr
        run = subprocess.run([curl, "-sS", "--fail", *resolve, f"https://google.serper.dev:{port}/health"],
                             capture_output=True, text=True, timeout=60,
                             env=base_env | {"CURL_CA_BUNDLE": env["CURL_CA_BUNDLE"]})
        assert run.returncode == 0 and json.loads(run.stdout)["status"] == "ok", run.stderr

    node = shutil.which("node")
    if node:  # NODE_EXTRA_CA_CERTS: read at start-up, added to Node's own CAs
        js = ("require('https').get({host: '127.0.0.1', port: +process.argv[1], path: '/health', servername: "
              "'s.jina.ai', headers: {host: 's.jina.ai'}}, r => { let b = ''; r.on('data', d => b += d); "
              "r.on('end', () => console.log(r.statusCode, b)); }).on('error', e => { console.error(e.code); "
              "process.exit(3); });")
        run = subprocess.run([node, "-e", js, str(port)], capture_output=True, text=True, timeout=60,
                             env=base_env | {"NODE_EXTRA_CA_CERTS": env["NODE_EXTRA_CA_CERTS"]})
        assert run.returncode == 0 and run.stdout.startswith("200"), run.stderr
        run = subprocess.run([node, "-e", js, str(port)], capture_output=True, text=True, timeout=60, env=base_env)
        assert run.returncode == 3  # without the variable Node refuses the certificate


# ============================================================================ --make-certs
def test_make_certs_prints_the_recipe_and_keeps_no_ca_key(tmp_path, capsys):
    from cryptography import x509

    from kit.cli import main

    out_dir = tmp_path / "certs"
    assert main(["serve-web", "--make-certs", str(out_dir), "--cert-host", "search.internal",
                 "--cert-host", "10.1.2.3"]) == 0
    out = capsys.readouterr().out
    assert "127.0.0.1 google.serper.dev r.jina.ai s.jina.ai\n" in out  # the /etc/hosts line
    for var, file in (("SSL_CERT_FILE", "ca-bundle.pem"), ("REQUESTS_CA_BUNDLE", "ca-bundle.pem"),
                      ("CURL_CA_BUNDLE", "ca-bundle.pem"), ("NODE_EXTRA_CA_CERTS", "ca.pem")):
        assert f"export {var}={out_dir / file}" in out
        assert f"export {var}={out_dir / file}\n" in (out_dir / "env.sh").read_text()
    assert f"--ssl-certfile {out_dir / 'server.pem'} --ssl-keyfile {out_dir / 'server-key.pem'}" in out
    assert f"curl --cacert {out_dir / 'ca.pem'} https://google.serper.dev/search" in out
    assert sorted(p.name for p in out_dir.iterdir()) == ["ca-bundle.pem", "ca.pem", "env.sh", "server-key.pem",
                                                          "server.pem"]
    assert (out_dir / "server-key.pem").stat().st_mode & 0o077 == 0
    assert [p.name for p in out_dir.iterdir() if b"PRIVATE KEY" in p.read_bytes()] == ["server-key.pem"]

    ca = x509.load_pem_x509_certificate((out_dir / "ca.pem").read_bytes())
    cert = x509.load_pem_x509_certificate((out_dir / "server.pem").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [*REAL_HOSTS, "localhost", "search.internal"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1", "10.1.2.3"]
    permitted = ca.extensions.get_extension_for_class(x509.NameConstraints).value.permitted_subtrees
    assert {n.value for n in permitted if isinstance(n, x509.DNSName)} == {*REAL_HOSTS, "localhost", "search.internal"}
    cert.verify_directly_issued_by(ca)
    check_tls_files(str(out_dir / "server.pem"), str(out_dir / "server-key.pem"))

    assert main(["serve-web", "--make-certs", str(tmp_path / "x"), "--cert-host", "not a name!"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("serve-web: --make-certs") and "neither a host name nor an IP address" in err
    (tmp_path / "file").write_text("")
    assert main(["serve-web", "--make-certs", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("serve-web: ") and err.count("\n") == 1 and "Traceback" not in err


# ============================================================================ bad files: exit 2, one line
def _encrypted_key(path: Path) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    return path


def test_bad_tls_files_are_one_line_and_exit_2_before_any_archive_is_opened(certs, tmp_path, capsys):
    from kit.cli import main

    other = make_certs(tmp_path / "other")
    (tmp_path / "junk.pem").write_text("hello\n")
    both = tmp_path / "both.pem"
    both.write_bytes(certs.cert.read_bytes() + certs.key.read_bytes())
    cert, key = str(certs.cert), str(certs.key)
    cases = [
        (["--ssl-certfile", str(tmp_path / "nope.pem"), "--ssl-keyfile", key], "--ssl-certfile", "no such file"),
        (["--ssl-certfile", cert, "--ssl-keyfile", str(tmp_path / "nope.pem")], "--ssl-keyfile", "no such file"),
        (["--ssl-certfile", str(tmp_path), "--ssl-keyfile", key], "--ssl-certfile", "not a regular file"),
        (["--ssl-certfile", str(tmp_path / "junk.pem"), "--ssl-keyfile", key], "junk.pem", "no PEM certificate"),
        (["--ssl-certfile", cert, "--ssl-keyfile", str(tmp_path / "junk.pem")], "junk.pem", "no private key"),
        (["--ssl-certfile", cert, "--ssl-keyfile", str(other.key)], str(other.key), "mismatched"),
        (["--ssl-certfile", cert, "--ssl-keyfile", str(_encrypted_key(tmp_path / "enc.pem"))], "enc.pem",
         "password-protected"),
        (["--ssl-certfile", cert], "--ssl-certfile", "no private key in it"),
        (["--ssl-keyfile", key], "--ssl-keyfile", "needs --ssl-certfile"),
        (["--ssl-certfile", cert, "--make-certs", str(tmp_path / "m")], "--make-certs", "exits"),
        (["--cert-host", "x.internal"], "--cert-host", "--make-certs"),
    ]
    for argv, names, says in cases:
        # "never-opened.zim" does not exist: the TLS files are checked before any archive is opened
        assert main(["serve-web", "never-opened.zim", "--cache-mode", "off", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("serve-web: ") and err.count("\n") == 1 and "Traceback" not in err, err
        assert names in err and says in err and "never-opened" not in err, err
    if os.geteuid() != 0:  # root reads any file
        locked = tmp_path / "locked.pem"
        locked.write_bytes(certs.cert.read_bytes())
        locked.chmod(0)
        assert main(["serve-web", "never-opened.zim", "--ssl-certfile", str(locked), "--ssl-keyfile", key]) == 2
        assert "cannot read it" in capsys.readouterr().err
    check_tls_files(str(both), None)  # a certificate file that holds its key is served as uvicorn serves it
    check_tls_files(None, None)  # no TLS: nothing to check


# ============================================================================ host routing (ASGI)
async def test_requests_to_the_jina_hosts_reach_the_services_routes():
    seen = []

    async def app(scope, receive, send):
        seen.append((scope.get("path"), scope.get("raw_path"), scope.get("query_string")))

    routed = route_by_host(app)

    async def call(host: str | None, path: str, raw: bytes | None = None, query: bytes = b""):
        headers = [(b"host", host.encode())] if host is not None else []
        await routed({"type": "http", "path": path, "raw_path": raw or path.encode(), "query_string": query,
                      "headers": headers}, None, None)
        return seen[-1]

    assert await call("r.jina.ai", "/https://en.wikipedia.org/wiki/A/B", b"/https://en.wikipedia.org/wiki/A%2FB") == (
        "/r/https://en.wikipedia.org/wiki/A/B", b"/r/https://en.wikipedia.org/wiki/A%2FB", b"")
    assert (await call("R.Jina.AI:443", "/https://x.org/p", query=b"a=1"))[:3:2] == ("/r/https://x.org/p", b"a=1")
    assert (await call("s.jina.ai", "/Ray Charles", b"/Ray%20Charles"))[:2] == ("/s/Ray Charles", b"/s/Ray%20Charles")
    assert (await call("s.jina.ai", "/", query=b"q=Ray"))[0] == "/s/"
    for host, path in (("r.jina.ai", "/r/https://x.org/"), ("r.jina.ai", f"/zim/{FRENCH}/A/Warrington.html"),
                       ("r.jina.ai", "/health"), ("google.serper.dev", "/search"), ("127.0.0.1:8321", "/search"),
                       (None, "/x"), ("[::1]:8321", "/search"), ("r.jina.ai.evil.org", "/x")):
        assert (await call(host, path))[0] == path, (host, path)
    await routed({"type": "lifespan"}, None, None)  # other scopes pass through untouched
    assert seen[-1] == (None, None, None)
