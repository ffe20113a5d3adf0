"""What is private in a run and what replaces it (the rules of :mod:`charllm_trace.sanitize`).

The key sets below decide what is dropped and which values name a host or a user;
:class:`Scrubber` learns the names from the files' headers and rewrites strings and JSON
trees (host pseudonyms, user token, path token, redacted words), memoised because names
repeat a lot. The file formats it is applied to are in :mod:`charllm_trace.sanitize.formats`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: Keys whose whole value is removed (compared lower-case).
DROP_KEYS = frozenset(
    {
        "env",
        "environ",
        "environment",
        "env_vars",
        "envvars",
        "environment_variables",
        "cwd",
        "pwd",
        "home",
        "call stack",
        "call_stack",
        "callstack",
        "stack",
        "py_stack",
        "python_stack",
        "stack_trace",
        "python id",
        "python parent id",
        "python module id",
        "python thread",
    }
)
#: Keys whose value names a host (compared lower-case).
HOST_KEYS = frozenset(
    {
        "hostname",
        "hostnames",
        "host",
        "hosts",
        "host_name",
        "nodename",
        "node_name",
        "node",
        "fqdn",
        "master_addr",
        "master_address",
        "ip",
        "ip_address",
    }
)
#: Keys whose value names a user (compared lower-case).
USER_KEYS = frozenset({"user", "username", "user_name", "started_by", "owner", "login", "logname"})
#: Environment variables that name a user or a host (their values are collected before env is dropped).
USER_ENV = ("USER", "LOGNAME", "USERNAME", "SUDO_USER", "SLURM_JOB_USER")
HOST_ENV = ("HOSTNAME", "HOST", "SLURMD_NODENAME", "MASTER_ADDR", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
#: Top-level keys of a Kineto profile that are dropped.
KINETO_DROP = frozenset({"traceName", "INFO"})
#: Kineto event categories that are Python stack frames.
PY_CATS = frozenset({"python_function", "python_function_call"})

PATH_TOKEN = "<path>"
USER_TOKEN = "user"
REDACT_TOKEN = "<redacted>"
_NOT_NAMES = frozenset({"", "localhost", "127.0.0.1", "::1", "0.0.0.0", "none", "null", "unknown"})

_PC = r"[\w.@+~%-]"  # characters of a path component
_FILE_EXT = (
    r"py|pyc|pyx|ipynb|json|jsonl|ndjson|gz|zst|pt|pth|et|log|txt|yaml|yml|toml|cfg|ini|sh|csv|parquet|"
    r"arrow|so|cu|cuh|cpp|cc|c|h|hpp|bin|ckpt|safetensors|npz|npy|pkl|out|err"
)
_PATH_RE = re.compile(
    "|".join(
        [
            r"file://\S+",
            r"[A-Za-z]:\\(?:[^\\\s\"']+\\)*[^\\\s\"']*",  # C:\Users\x
            rf"(?:~|\.\.?)/(?:{_PC}+/?)*",  # ~/x ./x ../x
            rf"(?<![\w.:/-])/(?:{_PC}+/)*{_PC}+/?",  # /abs/path
            rf"(?<![\w.:/-])(?:{_PC}+/)+{_PC}*\.(?:{_FILE_EXT})\b",  # rel/dir/file.py
        ]
    )
)


@dataclass
class SanitizeReport:
    """What ``sanitize_run`` did; counts are over all files."""

    written: list[str] = field(default_factory=list)  # output paths, relative to the output root
    left_out: list[str] = field(default_factory=list)  # input files not copied (unknown type)
    hosts: int = 0  # distinct host names pseudonymised
    users: int = 0  # distinct user names replaced
    env_dropped: int = 0  # environment mappings dropped
    keys_dropped: int = 0  # other private keys dropped (stacks, cwd, traceName, INFO ...)
    python_events_dropped: int = 0  # Kineto python_function events
    paths_replaced: int = 0  # distinct path strings replaced
    renamed: int = 0  # files whose name held a host or user name


class Scrubber:
    """Holds what to remove and rewrites strings and JSON trees (memoised: names repeat a lot)."""

    def __init__(self, redact: Iterable[str]) -> None:
        self.hosts: dict[str, str] = {}  # lower-case name -> pseudonym
        self.users: set[str] = set()
        self.redact = {w for w in redact if w}
        self.paths: set[str] = set()
        self.report = SanitizeReport()
        self._memo: dict[str, str] = {}
        self._keys: dict[Any, tuple[int, str]] = {}  # key -> (action, clean key), see _key
        self._re: re.Pattern[str] | None = None

    # ---- collecting -------------------------------------------------------
    def add_host(self, name: Any) -> None:
        if not isinstance(name, str):
            return
        for part in re.split(r"[\s,]+", name.strip()):
            low = part.lower()
            if low in _NOT_NAMES or len(low) < 2 or low in self.hosts or low.isdigit():
                continue
            self.hosts[low] = f"host{len(set(self.hosts.values()))}"
            short = low.split(".", 1)[0]
            if short != low and len(short) >= 2 and short not in self.hosts and not short.isdigit():
                self.hosts[short] = self.hosts[low]
            self._re = None
            self._memo.clear()
            self._keys.clear()

    def add_user(self, name: Any) -> None:
        if isinstance(name, str) and name.strip().lower() not in _NOT_NAMES and len(name.strip()) >= 2:
            if name.strip() not in self.users:
                self.users.add(name.strip())
                self._re = None
                self._memo.clear()
                self._keys.clear()

    def collect(self, obj: Any, key: str = "") -> None:
        """Find host and user names in a JSON tree (keys and environment variables)."""
        kl = key.lower()
        if isinstance(obj, dict):
            if kl in ("env", "environ", "environment", "env_vars", "envvars", "environment_variables"):
                for k, v in obj.items():
                    if k in USER_ENV:
                        self.add_user(v)
                    elif k in HOST_ENV:
                        self.add_host(v)
                return
            if kl == "uname":
                self.add_host(obj.get("node") or obj.get("nodename"))
            if kl in HOST_KEYS or kl in USER_KEYS:
                for v in obj.values():
                    self.collect(v, key)
                return
            for k, v in obj.items():
                self.collect(v, str(k))
        elif isinstance(obj, list):
            if kl in HOST_KEYS or kl in USER_KEYS:
                for v in obj:
                    self.collect(v, key)
            elif len(obj) < 10_000:  # event lists hold no host/user keys worth a walk
                for v in obj:
                    self.collect(v, "")
        elif isinstance(obj, str):
            if kl in HOST_KEYS and kl != "node":
                self.add_host(obj)
            elif kl in USER_KEYS:
                self.add_user(obj)

    # ---- rewriting --------------------------------------------------------
    def _pattern(self) -> re.Pattern[str] | None:
        if self._re is None:
            words = sorted(set(self.hosts) | self.users, key=len, reverse=True)
            if not words:
                return None
            alt = "|".join(re.escape(w) for w in words)
            self._re = re.compile(rf"(?<![A-Za-z0-9_])(?:{alt})(?![A-Za-z0-9_])", re.IGNORECASE)
        return self._re

    def _word(self, m: re.Match[str]) -> str:
        w = m.group(0)
        host = self.hosts.get(w.lower())
        return host if host is not None else USER_TOKEN

    def _path(self, m: re.Match[str]) -> str:
        self.paths.add(m.group(0))
        return PATH_TOKEN

    def text(self, s: str) -> str:
        out = self._memo.get(s)
        if out is not None:
            return out
        out = s
        for w in self.redact:
            if w in out:
                out = out.replace(w, REDACT_TOKEN)
        if "/" in out or "\\" in out:
            out = _PATH_RE.sub(self._path, out)
        pat = self._pattern()
        if pat is not None:
            out = pat.sub(self._word, out)
        if len(self._memo) < 2_000_000:
            self._memo[s] = out
        return out

    def host_value(self, v: Any) -> Any:
        if isinstance(v, str):
            self.add_host(v)
            low = v.strip().lower()
            if low in self.hosts:
                return self.hosts[low]
            return self.text(v)
        if isinstance(v, list):
            return [self.host_value(x) for x in v]
        if isinstance(v, dict):
            return {self.text(str(k)): self.host_value(x) for k, x in v.items()}
        return v

    def _key(self, k: Any) -> tuple[int, str]:
        """What to do with a key (0 keep, 1 drop env, 2 drop other, 3 host, 4 user) and its clean form."""
        kl = str(k).lower()
        if kl in DROP_KEYS:
            act = 1 if kl.startswith("env") else 2
        elif kl in HOST_KEYS:
            act = 3
        elif kl in USER_KEYS:
            act = 4
        else:
            act = 0
        return act, self.text(str(k))

    def clean(self, obj: Any, key: str = "") -> Any:
        t = type(obj)
        if t is str:
            out = self._memo.get(obj)
            return out if out is not None else self.text(obj)
        if t is dict:
            res: dict[str, Any] = {}
            keys = self._keys
            for k, v in obj.items():
                kk = keys.get(k)
                if kk is None:
                    kk = keys[k] = self._key(k)
                act, ck = kk
                tv = type(v)
                if act == 0:
                    if tv is int or tv is float or tv is bool or v is None:
                        res[ck] = v
                    else:
                        res[ck] = self.clean(v, k)
                elif act == 1:
                    self.report.env_dropped += 1
                elif act == 2:
                    self.report.keys_dropped += 1
                elif act == 3 and (str(k).lower() != "node" or tv is str):
                    res[ck] = self.host_value(v)
                elif act == 4 and tv is str:
                    res[ck] = USER_TOKEN
                else:
                    res[ck] = self.clean(v, k)
            return res
        if t is list:
            out_l = []
            for x in obj:
                if type(x) is dict and x.get("cat") in PY_CATS:
                    self.report.python_events_dropped += 1
                    continue
                out_l.append(self.clean(x, key))
            return out_l
        return obj

    def leftovers(self, data: bytes) -> list[str]:
        """Removed strings still present in ``data`` (case-insensitive for names)."""
        low = data.lower()
        # a name that is also a replacement (sanitizing a sanitized run: host0, user) is no leak
        tokens = {*self.hosts.values(), USER_TOKEN}
        names = [n for n in [*self.hosts, *(u.lower() for u in self.users)] if n not in tokens]
        found = [
            n for n in names if re.search(rb"(?<![a-z0-9_])" + re.escape(n.encode()) + rb"(?![a-z0-9_])", low)
        ]
        found += [w for w in self.redact if w.encode() in data]
        found += [p for p in self.paths if len(p) > 3 and p.encode() in data]
        return found


def collect_json(sc: Scrubber, doc: Any) -> None:
    if not isinstance(doc, dict):
        sc.collect(doc)
    else:
        for k, v in doc.items():
            if k in ("traceEvents", "nodes") and isinstance(v, list):
                continue  # the event lists: host/user keys live in the headers
            sc.collect(v, str(k))


def scrub_name(sc: Scrubber, rel: str) -> str:
    """A file's relative path with host names (in their file-name-safe form) and user names replaced."""
    out = rel
    names = sorted(
        [(re.sub(r"[^A-Za-z0-9._-]", "_", h), p) for h, p in sc.hosts.items()]
        + [(u, USER_TOKEN) for u in sc.users],
        key=lambda x: len(x[0]),
        reverse=True,
    )
    for name, repl in names:
        out = re.sub(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])", repl, out, flags=re.IGNORECASE)
    for w in sc.redact:
        out = out.replace(w, REDACT_TOKEN)
    return out
