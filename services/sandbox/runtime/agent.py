"""aiforge sandbox agent: the init process of a gVisor sandbox.

It runs as uid 1000 beside the untrusted code (python code runs in this
very process), so the host trusts nothing it says: every line the host
reads is bounded and validated there. The agent only makes the sandbox
convenient and fast: a resident Python namespace, a resident Bash shell,
file access inside /mnt/data, and (allow-list sandboxes) a loopback HTTP
proxy port forwarded to the host's egress proxy socket.

Protocol: JSON lines on copies of fd 0 (requests) and fd 1 (replies).
Requests carry an integer "id"; replies echo it. Ops:
  exec   {lang, code, cpu, max}   -> out* {stream, data}, done {exit, error, msg, trunc_out, trunc_err}
  write  {path}                   -> ok | err ; then wdata {data: b64}* and wclose -> ok | err
  read   {path, max}              -> rdata {data: b64}* then ok {size} | err
  list   {max}                    -> file {path, size, mtime}* then ok
  remove {path}                   -> ok | err
On start it prints {"op": "ready"}.
"""

import base64
import errno
import json
import os
import queue
import resource
import signal
import socket
import stat
import sys
import threading
import time

DATA = "/mnt/data"
CHUNK = 16384
PROXY_SOCK = "/opt/egress/proxy.sock"
PROXY_PORT = 3128

threading.stack_size(512 << 10)
for arg in sys.argv[1:]:
    if arg.startswith("--nproc="):
        n = int(arg[len("--nproc=") :])
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
proto_out_fd = os.dup(1)
out_lock = threading.Lock()


def send(msg):
    line = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
    with out_lock:
        view = memoryview(line)
        while view:
            n = os.write(proto_out_fd, view)
            view = view[n:]


# fd 0 is /dev/null; fd 1 and 2 are pipes drained below.
devnull = os.open("/dev/null", os.O_RDWR)
os.dup2(devnull, 0)


class CPULimit(BaseException):
    pass


def on_xcpu(signum, frame):
    raise CPULimit()


signal.signal(signal.SIGXCPU, on_xcpu)


class Drain:
    """Reads one pipe for ever, forwarding what the current exec writes.

    An exec's output ends at its marker (written on the same pipe after the
    code), so output and end are ordered; output beyond max is read and
    discarded."""

    def __init__(self, fd, stream):
        self.fd = fd
        self.stream = stream
        self.lock = threading.Lock()
        self.id = None
        self.marker = b""
        self.max = 0
        self.sent = 0
        self.truncated = False
        self.ended = threading.Event()
        self.ended.set()
        self.tail = b""
        import codecs

        self.codecs = codecs
        threading.Thread(target=self.run, daemon=True).start()

    def begin(self, exec_id, marker, max_bytes):
        with self.lock:
            self.id = exec_id
            self.marker = marker
            self.max = max_bytes
            self.sent = 0
            self.truncated = False
            self.tail = b""
            self.decoder = self.codecs.getincrementaldecoder("utf-8")("replace")
            self.ended.clear()

    def emit(self, data, final=False):
        # called with self.lock held
        if self.id is None:
            return
        room = self.max - self.sent
        if len(data) > room:
            data = data[: max(room, 0)]
            self.truncated = True
        self.sent += len(data)
        text = self.decoder.decode(data, final)
        if text:
            send({"op": "out", "id": self.id, "stream": self.stream, "data": text})

    def run(self):
        while True:
            try:
                data = os.read(self.fd, CHUNK)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data:
                return
            with self.lock:
                if self.id is None:
                    continue
                buf = self.tail + data
                i = buf.find(self.marker)
                if i >= 0:
                    self.emit(buf[:i], True)
                    self.id = None
                    self.ended.set()
                    continue
                # hold back only what may be the start of the marker
                cut = partial_marker(buf, self.marker)
                self.emit(buf[:cut])
                self.tail = buf[cut:]

    def finish(self, timeout):
        ok = self.ended.wait(timeout)
        with self.lock:
            if not ok:
                self.emit(self.tail, True)
                self.id = None
            return self.truncated


def partial_marker(buf, marker):
    """The index where a suffix of buf that begins marker starts, or len(buf)."""
    i = buf.find(marker[:1], max(0, len(buf) - len(marker) + 1))
    while i >= 0:
        if marker.startswith(buf[i:]):
            return i
        i = buf.find(marker[:1], i + 1)
    return len(buf)


def pipe_pair(stream):
    r, w = os.pipe()
    return Drain(r, stream), w


py_out, py_out_w = pipe_pair("stdout")
py_err, py_err_w = pipe_pair("stderr")
bash_out, bash_out_w = pipe_pair("stdout")
bash_err, bash_err_w = pipe_pair("stderr")


def point_std_fds():
    os.dup2(py_out_w, 1)
    os.dup2(py_err_w, 2)


point_std_fds()
sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False, buffering=1)
sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False, buffering=1)

# The resident shell: reads NUL-terminated code on fd 3, evals it with
# stdout/stderr on the drained pipes, prints markers, reports $? on fd 4.
BASH_LOOP = r"""
while IFS= read -r -d '' __aiforge_marker <&3 && IFS= read -r -d '' __aiforge_code <&3; do
  eval "$__aiforge_code" 3<&- 4>&-
  __aiforge_rc=$?
  printf '%s' "$__aiforge_marker"; printf '%s' "$__aiforge_marker" >&2
  printf '%d\n' "$__aiforge_rc" >&4
done
"""


class Bash:
    """The resident shell, restarted when the code ends it.

    Each shell leads a session of its own, so what it starts can be told
    apart from the agent's own children (the ones Python code starts,
    which that code waits for): see reap_orphans."""

    def __init__(self):
        self.pid = 0
        self.lock = threading.Lock()
        self.sessions = set()
        self.start()

    def start(self):
        with self.lock:
            self._start()

    def _start(self):
        code_r, code_w = os.pipe()
        rc_r, rc_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                os.dup2(devnull, 0)
                os.dup2(bash_out_w, 1)
                os.dup2(bash_err_w, 2)
                os.dup2(code_r, 3)
                os.dup2(rc_w, 4)
                os.closerange(5, 4096)
                os.chdir(DATA)
                os.execv("/bin/bash", ["bash", "--norc", "--noprofile", "-c", BASH_LOOP])
            finally:
                os._exit(127)
        os.close(code_r)
        os.close(rc_w)
        self.pid = pid
        self.sessions.add(pid)
        self.code_w = code_w
        self.rc = os.fdopen(rc_r, "rb")

    def stop(self):
        for f in (lambda: os.close(self.code_w), self.rc.close):
            try:
                f()
            except OSError:
                pass
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass

    def alive(self):
        try:
            p, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return p == 0

    def run(self, code, marker, cpu):
        if not self.alive():
            self.stop()
            self.start()
        try:
            used = cpu_seconds(self.pid)
            resource.prlimit(self.pid, resource.RLIMIT_CPU, (used + cpu, resource.RLIM_INFINITY))
        except (OSError, ValueError, IndexError):
            pass
        try:
            os.write(self.code_w, marker + b"\0" + code.encode() + b"\0")
            line = self.rc.readline()
        except OSError:
            line = b""
        if line:
            try:
                rc = int(line)
            except ValueError:
                rc = -1
            return rc, "xcpu" if rc == 128 + signal.SIGXCPU else ""
        # the code ended the shell (exit, exec, a signal): say how, restart
        status = 0
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.stop()
        self.start()
        # the old shell cannot write the marker any more
        for fd in (bash_out_w, bash_err_w):
            os.write(fd, marker)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            return 128 + sig, "xcpu" if sig == signal.SIGXCPU else ""
        return (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1), ""


def proc_stat(pid):
    """The fields of /proc/PID/stat after the command name (state first)."""
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_seconds(pid):
    fields = proc_stat(pid)
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) // ticks + 1


bash = Bash()


def reap_orphans():
    """Reaps the zombies of processes the shells started whose parents are
    gone. The agent is the sandbox's init: orphans become its children, and
    left unreaped each would hold a process slot (RLIMIT_NPROC) for ever, so
    after a process flood is killed nothing could start again. Only zombies
    in a shell's session are reaped: the agent's own children are waited for
    by whoever started them (the resident shell by Bash, a subprocess by the
    Python code that made it)."""
    me = os.getpid()
    with bash.lock:
        seen = set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            try:
                fields = proc_stat(pid)
                state, ppid, sid = fields[0], int(fields[1]), int(fields[3])
            except (OSError, IndexError, ValueError):
                continue
            seen.add(sid)
            if state == "Z" and ppid == me and sid in bash.sessions and pid != bash.pid:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        # a session with no process left is over
        bash.sessions &= seen | {bash.pid}


def reaper(wake):
    while True:
        os.read(wake, 512)
        try:
            reap_orphans()
        except Exception:
            pass


def start_reaper():
    # SIGCHLD wakes the reaper thread through the wakeup fd, which the
    # interpreter writes from its C-level handler at once, whatever the main
    # thread (running the code) is doing.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    threading.Thread(target=reaper, args=(wake_r,), daemon=True).start()


namespace = {"__name__": "__main__", "__builtins__": __builtins__}


def print_user_traceback(e):
    """Prints e's traceback without the agent's own frames: the code's
    frames start at "<exec>"."""
    import traceback

    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != "<exec>":
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)


def run_python(code, cpu):
    used = int(sum(resource.getrusage(resource.RUSAGE_SELF)[:2])) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (used + cpu, resource.RLIM_INFINITY))
    error = ""
    rc = 0
    try:
        compiled = compile(code, "<exec>", "exec")
        exec(compiled, namespace)
    except CPULimit:
        rc, error = 1, "xcpu"
        sys.stderr.write("CPU time limit exceeded\n")
    except SystemExit as e:
        if e.code is None:
            rc = 0
        elif isinstance(e.code, int):
            rc = e.code
        else:
            rc = 1
            sys.stderr.write(str(e.code) + "\n")
    except MemoryError as e:
        rc, error = 1, "memory"
        print_user_traceback(e)
    except BaseException as e:
        rc = 1
        print_user_traceback(e)
    finally:
        resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    return rc, error


def do_exec(req):
    exec_id = req["id"]
    # in case a SIGCHLD went missing (code can replace the handler)
    reap_orphans()
    nonce = os.urandom(12).hex().encode()
    max_bytes = int(req.get("max", 1 << 20))
    cpu = max(1, int(req.get("cpu", 30)))
    if req.get("lang") == "python":
        marker = b"\x00\x1e" + nonce + b"\x1e\x00"
        point_std_fds()
        py_out.begin(exec_id, marker, max_bytes)
        py_err.begin(exec_id, marker, max_bytes)
        rc, error = run_python(req.get("code", ""), cpu)
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        point_std_fds()
        for fd in (1, 2):
            try:
                os.write(fd, marker)
            except OSError:
                pass
        out, err = py_out, py_err
    else:
        # bash variables hold no NUL
        marker = b"\x1e" + nonce + b"\x1e"
        bash_out.begin(exec_id, marker, max_bytes)
        bash_err.begin(exec_id, marker, max_bytes)
        rc, error = bash.run(req.get("code", ""), marker, cpu)
        out, err = bash_out, bash_err
    t_out = out.finish(0.5)
    t_err = err.finish(0.5)
    send({"op": "done", "id": exec_id, "exit": rc, "error": error, "trunc_out": t_out, "trunc_err": t_err})


# ---- files ---------------------------------------------------------------


class PathError(Exception):
    def __init__(self, code, msg):
        self.code = code
        self.msg = msg


def check_path(path):
    """Refuses what is not a plain path under /mnt/data, and symbolic links
    anywhere on the way (the host already cleaned the path)."""
    if not isinstance(path, str) or not path.startswith(DATA + "/") or "\0" in path:
        raise PathError("invalid_path", "not a path under /mnt/data")
    parts = path[len(DATA) + 1 :].split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise PathError("invalid_path", "path climbs or is empty")
    cur = DATA
    for p in parts[:-1]:
        cur += "/" + p
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return path, parts
        if stat.S_ISLNK(st.st_mode):
            raise PathError("invalid_path", "path goes through a symbolic link")
        if not stat.S_ISDIR(st.st_mode):
            raise PathError("invalid_path", "path goes through a file")
    return path, parts


def open_nofollow(path, flags):
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PathError("invalid_path", "file is a symbolic link")
        if e.errno == errno.ENOENT:
            raise PathError("container_file_not_found", "no such file")
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise PathError("file_too_large", "the sandbox's disk is full")
        if e.errno in (errno.EISDIR, errno.ENOTDIR):
            raise PathError("invalid_path", "not a regular file")
        raise PathError("invalid_path", e.strerror or "cannot open")


writers = {}


def do_write(req):
    path, parts = check_path(req.get("path"))
    cur = DATA
    for p in parts[:-1]:
        cur += "/" + p
        try:
            os.mkdir(cur, 0o755)
        except FileExistsError:
            pass
        st = os.lstat(cur)
        if not stat.S_ISDIR(st.st_mode):
            raise PathError("invalid_path", "path goes through a symbolic link or file")
    fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PathError("invalid_path", "not a regular file")
    writers[req["id"]] = fd
    send({"op": "ok", "id": req["id"]})


def do_wdata(req):
    fd = writers.get(req["id"])
    if fd is None:
        return
    try:
        data = base64.b64decode(req.get("data", ""))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as e:
        os.close(fd)
        writers[req["id"]] = None
        code = "file_too_large" if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else "invalid_path"
        send({"op": "err", "id": req["id"], "code": code, "msg": e.strerror or "write failed"})


def do_wclose(req):
    if req["id"] not in writers:
        return
    fd = writers.pop(req["id"])
    if fd is None:
        return  # the error was sent
    try:
        os.close(fd)
    except OSError as e:
        send({"op": "err", "id": req["id"], "code": "file_too_large", "msg": e.strerror or "close failed"})
        return
    send({"op": "ok", "id": req["id"]})


def do_read(req):
    path, _ = check_path(req.get("path"))
    fd = open_nofollow(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PathError("invalid_path", "not a regular file")
        if st.st_size > int(req.get("max", 0)):
            raise PathError("file_too_large", "file is over the limit")
        total = 0
        while True:
            data = os.read(fd, 49152)
            if not data:
                break
            total += len(data)
            if total > int(req.get("max", 0)):
                raise PathError("file_too_large", "file is over the limit")
            send({"op": "rdata", "id": req["id"], "data": base64.b64encode(data).decode()})
        send({"op": "ok", "id": req["id"], "size": total})
    finally:
        os.close(fd)


def do_list(req):
    limit = int(req.get("max", 10000))
    n = 0
    for root, dirs, names in os.walk(DATA):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in names:
            p = os.path.join(root, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                send({"op": "file", "id": req["id"], "path": p, "size": st.st_size, "mtime": int(st.st_mtime)})
                n += 1
                if n >= limit:
                    break
        if n >= limit:
            break
    send({"op": "ok", "id": req["id"]})


def do_remove(req):
    path, _ = check_path(req.get("path"))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise PathError("container_file_not_found", "no such file")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        raise PathError("invalid_path", "not a file")
    os.unlink(path)
    send({"op": "ok", "id": req["id"]})


FILE_OPS = {"write": do_write, "wdata": do_wdata, "wclose": do_wclose, "read": do_read, "list": do_list, "remove": do_remove}


# ---- egress --------------------------------------------------------------


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def forward(conn):
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(PROXY_SOCK)
    except OSError:
        conn.close()
        up.close()
        return
    t = threading.Thread(target=pump, args=(up, conn), daemon=True)
    t.start()
    pump(conn, up)
    t.join()
    conn.close()
    up.close()


def serve_egress():
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", PROXY_PORT))
    ls.listen(64)
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=forward, args=(conn,), daemon=True).start()


# ---- main ----------------------------------------------------------------

execs = queue.Queue()


def reader():
    for line in proto_in:
        try:
            req = json.loads(line)
            op = req["op"]
            int(req["id"])
        except (ValueError, KeyError, TypeError):
            continue
        if op == "exec":
            execs.put(req)
            continue
        fn = FILE_OPS.get(op)
        if fn is None:
            continue
        try:
            fn(req)
        except PathError as e:
            send({"op": "err", "id": req["id"], "code": e.code, "msg": e.msg})
        except Exception as e:
            send({"op": "err", "id": req["id"], "code": "invalid_path", "msg": type(e).__name__})
    # the host went away: end the sandbox
    os._exit(0)


def main():
    if os.path.exists(PROXY_SOCK):
        threading.Thread(target=serve_egress, daemon=True).start()
    threading.Thread(target=reader, daemon=True).start()
    start_reaper()
    send({"op": "ready"})
    while True:
        req = execs.get()
        try:
            do_exec(req)
        except BaseException as e:
            send({"op": "done", "id": req["id"], "exit": -1, "error": "agent", "msg": type(e).__name__})


main()
