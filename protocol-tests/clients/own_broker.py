"""A Sluice broker started by a test itself (not run.sh's), on a port and data
dir of its own, so that the test can kill -9 it and restart it on the same data
dir and port without taking the other tests' broker down. Not a test.

run.sh exports SLUICE_BIN (the broker binary) and SLUICE_SERVE_ARGS (the
settings it starts its own broker with); SLUICE_KEEP=1 keeps the data dir.
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time


class Broker:
    def __init__(self, prefix="sluice-own-"):
        self.bin = os.environ["SLUICE_BIN"]
        self.args = os.environ.get("SLUICE_SERVE_ARGS", "").split()
        self.dir = tempfile.mkdtemp(prefix=prefix)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.addr = f"127.0.0.1:{self.port}"
        self.log = open(os.path.join(self.dir, "broker.log"), "ab")
        self.proc = None
        self.start()

    def start(self):
        """Start the broker and wait (30 s at most) until it accepts connections."""
        self.proc = subprocess.Popen([self.bin, "serve", "--listen", self.addr, "--data-dir",
                                      os.path.join(self.dir, "data"), *self.args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"broker exited ({self.proc.returncode}); log:\n{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.time() > deadline:
                    raise AssertionError(f"broker not listening on {self.addr} after 30 s")
                time.sleep(0.05)

    def kill9_and_restart(self):
        self.proc.kill()
        self.proc.wait()
        self.start()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        if os.environ.get("SLUICE_KEEP") != "1":
            shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, n=20):
        with open(self.log.name, errors="replace") as f:
            return "".join(f.readlines()[-n:])
