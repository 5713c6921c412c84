"""Local servers on 127.0.0.1 that misbehave on purpose, and the real proxies
(tinyproxy, microsocks) the tests drive."""

import atexit
import http.server
import os
import shutil
import socket
import socketserver
import ssl
import struct
import subprocess
import tempfile
import threading
import time

import pytest


def need_tool(name):
    """The path of a program, or skip (fail when CI is set: CI must exercise it)."""
    path = shutil.which(name) or next(
        (os.path.join(d, name) for d in ("/usr/sbin", "/usr/bin", "/usr/local/bin") if os.path.isfile(os.path.join(d, name))),
        None,
    )
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("%s is not installed but CI is set (apt-get install %s)" % (name, name))
        pytest.skip("%s is not installed (apt-get install %s)" % (name, name))
    return path


def need_module(name):
    try:
        return __import__(name)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("python package %s is missing but CI is set" % name)
        pytest.skip("python package %s is not installed" % name)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc=None, log=None, limit=10.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("exited early (%s): %s" % (proc.returncode, open(log).read() if log else ""))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing accepted on port %d within %ss" % (port, limit))


class _Loop(object):
    """An accept loop in a thread; ``handle(conn)`` runs per connection in its own thread."""

    def __init__(self, handle, backlog=64):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.port = self.sock.getsockname()[1]
        self.handle = handle
        self.conns = []
        self._stop = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            self.handle(conn)
        except OSError:
            pass

    def close(self):
        self._stop = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


def refusing_port():
    """A port where nothing listens: connecting gets ECONNREFUSED."""
    return free_port()


def _read_head(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def black_hole():
    """Accepts and reads, never answers: the TCP connection is up, the reply never comes."""

    def handle(conn):
        while conn.recv(4096):
            pass

    return _Loop(handle)


def resetting():
    """Reads the request head, then closes with RST (SO_LINGER 0)."""

    def handle(conn):
        _read_head(conn)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    return _Loop(handle)


def proxy_407():
    """An HTTP proxy that answers 407 to every CONNECT and absolute-form request."""

    def handle(conn):
        _read_head(conn)
        conn.sendall(
            b"HTTP/1.1 407 Proxy Authentication Required\r\n"
            b'Proxy-Authenticate: Basic realm="test"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'
        )
        conn.close()

    return _Loop(handle)


class Unaccepting(object):
    """A listener whose accept queue is full and never drained: the kernel drops further
    SYNs, so a connect times out (a real connect timeout, on loopback)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.fillers = []
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            try:
                c.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            self.fillers.append(c)
        time.sleep(0.2)
        probe = socket.socket()
        probe.settimeout(0.5)
        try:
            probe.connect(("127.0.0.1", self.port))
            raise RuntimeError("the accept queue did not fill; cannot provoke a connect timeout")
        except socket.timeout:
            pass
        finally:
            probe.close()

    def close(self):
        for c in self.fillers:
            c.close()
        self.sock.close()


def _self_signed(cert_path, key_path):
    """A self-signed certificate for localhost and 127.0.0.1, made with `cryptography`
    (Scrapy depends on it)."""
    need_module("cryptography")
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


class Site(object):
    """A small site: ``/page/N`` links nowhere and says which page it is; ``/status/N``
    answers N (with ``Retry-After: 7`` for 429/503); everything is counted.

    ``tls=True`` serves HTTPS with a fresh self-signed certificate for 127.0.0.1 and
    localhost (its path is ``self.cert``); ``ban_first=True`` answers 403 to the first
    request of every ``/page/N``, a ban the gateway cannot see inside a tunnel;
    ``ban_first=["/page/0"]`` does so only for the paths named."""

    def __init__(self, tls=False, ban_first=False):
        hits = self.hits = []
        seen = set()

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                hits.append(self.path)
                status, extra = 200, []
                if self.path.startswith("/status/"):
                    status = int(self.path.split("/")[2])
                    if status in (429, 503):
                        extra.append(("Retry-After", "7"))
                elif (ban_first is True or (ban_first and self.path in ban_first)) \
                        and self.path not in seen:
                    seen.add(self.path)
                    status = 403
                body = ("<html><body><h1>%s</h1></body></html>" % self.path).encode()
                self.send_response(status)
                for k, v in extra:
                    self.send_header(k, v)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = S(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.cert = None
        if tls:
            self.dir = tempfile.mkdtemp(prefix="pp-site")
            self.cert, key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
            _self_signed(self.cert, key)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.cert, key)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.url = "https://127.0.0.1:%d" % self.port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        if self.cert:
            shutil.rmtree(self.dir, ignore_errors=True)


class Proc(object):
    """A real proxy process in its own process group, killed on close."""

    def __init__(self, name, argv, port, dirpath):
        self.name, self.port, self.dir = name, port, dirpath
        self.log = os.path.join(dirpath, name + ".log")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=dirpath, start_new_session=True)
        wait_port(port, self.proc, self.log)

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def tinyproxy(user=None, password=None, deny_all=False):
    """Real tinyproxy on 127.0.0.1; ``deny_all`` makes it answer 403 ("Filtered") to every
    request, as a proxy that a site bans looks to a scraper."""
    binary = need_tool("tinyproxy")
    d = tempfile.mkdtemp(prefix="pp-tinyproxy")
    os.chmod(d, 0o755)
    port = free_port()
    conf = ["Port %d" % port, "Listen 127.0.0.1", "Timeout 30", "MaxClients 50", "Allow 127.0.0.1", "LogLevel Info"]
    if user:
        conf.append("BasicAuth %s %s" % (user, password))
    if deny_all:
        flt = os.path.join(d, "filter")
        with open(flt, "w") as f:
            f.write(".*\n")
        os.chmod(flt, 0o644)
        conf += ['Filter "%s"' % flt, "FilterURLs On", "FilterExtended On"]
    if os.geteuid() == 0:
        conf += ["User nobody", "Group nogroup"]
    path = os.path.join(d, "tinyproxy.conf")
    with open(path, "w") as f:
        f.write("\n".join(conf) + "\n")
    os.chmod(path, 0o644)
    return Proc("tinyproxy", [binary, "-d", "-c", path], port, d)


def microsocks(user=None, password=None):
    binary = need_tool("microsocks")
    d = tempfile.mkdtemp(prefix="pp-microsocks")
    port = free_port()
    argv = [binary, "-i", "127.0.0.1", "-p", str(port)]
    if user:
        argv += ["-u", user, "-P", password]
    return Proc("microsocks", argv, port, d)


class Recorder(object):
    """A fake daemon on a Unix socket: records request lines and answers from a script.

    An answer is a dict (sent with the request's ``id`` unless it names its own), the
    string ``"close"`` (close that connection), or a callable taking the request and
    returning one of those. Each connection is served in its own thread."""

    def __init__(self, answers):
        self.dir = tempfile.mkdtemp(prefix="pp-rec")
        # Tests rarely close a recorder: its directory goes when the interpreter exits.
        atexit.register(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "rec.sock")
        self.lines, self.answers = [], list(answers)
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        self.sock.listen(16)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        import json

        f = conn.makefile("rwb")
        try:
            for line in f:
                req = json.loads(line)
                with self.lock:
                    self.lines.append(req)
                    ans = self.answers.pop(0) if self.answers else {"ok": True}
                if callable(ans):
                    ans = ans(req)
                if ans == "close":
                    break
                ans = dict(ans)
                ans.setdefault("id", req.get("id"))
                f.write((json.dumps(ans) + "\n").encode())
                f.flush()
        except OSError:
            pass
        finally:
            f.close()
            conn.close()

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class FakeGateway(object):
    """An HTTP proxy on 127.0.0.1 that answers plain-HTTP (absolute-form) requests from a
    script of ``(status, headers, body)``, the way the gateway answers for itself (e.g.
    ``503`` with ``X-Proxypool-Error: pool_empty``); after the script, 200 with the path
    in an ``<h1>`` and ``X-Proxypool-Endpoint: 7``. Every request is recorded in ``hits``
    as ``(path, proxy username)``."""

    def __init__(self, script=()):
        hits = self.hits = []
        answers = list(script)
        lock = threading.Lock()

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                from urllib.parse import urlsplit

                import base64

                path = urlsplit(self.path).path
                auth = self.headers.get("Proxy-Authorization") or ""
                user = base64.b64decode(auth.split()[1]).decode().split(":")[0] if auth.startswith("Basic ") else None
                with lock:
                    hits.append((path, user))
                    status, headers, body = answers.pop(0) if answers else (
                        200, {"X-Proxypool-Endpoint": "7"}, ("<html><body><h1>%s</h1></body></html>" % path).encode())
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = S(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
