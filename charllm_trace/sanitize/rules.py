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

from charllm_trace.sanitize.patterns import (
    ENDPOINT_FLAG,
    ENDPOINT_RE,
    HOME_RE,
    IPV4_RE,
    IPV6_RE,
    PATH_RE,
    UUID_RE,
    is_ipv6,
)

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
        "pid_start",  # the process's start time (in clock ticks): with the pid it identifies the process
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
        "rdzv_endpoint",
        "rendezvous_endpoint",
        "endpoint",
        "init_method",
        "dist_url",
    }
)
#: Keys whose value names hardware (GPU models, device properties): kept verbatim, never
#: rewritten, even where a host name is a word of it (a host ``a100``, a GPU "NVIDIA A100-...").
HW_KEYS = frozenset(
    {
        "deviceproperties",
        "device_properties",
        "devices",
        "gpus",
        "rank_devices",
        "gpu_name",
        "device_name",
        "gpu_model",
    }
)
#: Keys whose integer value is an operating-system process or thread id: remapped (see ``Scrubber.ids``).
ID_KEYS = frozenset({"pid", "tid", "ppid", "launcher_pid", "sort_index", "system_tid", "fw_tid", "root_pid"})
#: Kineto categories of GPU events (their ``pid`` is a device index, their ``tid`` a stream).
GPU_CATS = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "memcpy", "memset", "mtia_ccp_events"}
)
ID_BASE = 10_000_000  # above any Linux pid_max (2**22): ids map in order to ID_BASE, ID_BASE + 1, ...
_MIN_ID = 100  # smaller numbers (device indices, stream ids, pid 1) identify nothing and are kept
_ID_TEXT_RE = re.compile(r"\b((?:pid|tid|thread|process|proc)\s*[ =:#]?\s*)(\d{3,})\b", re.IGNORECASE)
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


@dataclass
class SanitizeReport:
    """What ``sanitize_run`` did; counts are over all files."""

    written: list[str] = field(default_factory=list)  # output paths, relative to the output root
    left_out: list[str] = field(default_factory=list)  # input files not copied (unknown type)
    hosts: int = 0  # distinct host names pseudonymised
    users: int = 0  # distinct user names replaced
    env_dropped: int = 0  # environment mappings dropped
    keys_dropped: int = 0  # other private keys dropped (stacks, cwd, traceName, INFO ...)
    python_frames_cleaned: int = 0  # Kineto python_function events (kept, file paths removed)
    paths_replaced: int = 0  # distinct path strings replaced
    renamed: int = 0  # files whose name held a host or user name
    ids: int = 0  # distinct process/thread ids remapped


class Scrubber:
    """Holds what to remove and rewrites strings and JSON trees (memoised: names repeat a lot)."""

    def __init__(self, redact: Iterable[str]) -> None:
        self.hosts: dict[str, str] = {}  # lower-case name -> pseudonym
        self.uuids: dict[str, int] = {}  # device UUID (bare, lower-case) -> its pseudonym's number
        self.users: set[str] = set()
        self.redact = {w for w in redact if w}
        self.paths: set[str] = set()
        self.hardware: set[str] = set()  # hardware names, kept verbatim (see HW_KEYS)
        # process and thread ids, mapped in order to ID_BASE + i (so sorting and grouping by them,
        # and which thread is which, are unchanged)
        self.ids: set[int] = set()
        self._id_map: dict[int, int] | None = None
        self.report = SanitizeReport()
        self._memo: dict[str, str] = {}
        self._keys: dict[Any, tuple[int, str]] = {}  # key -> (action, clean key), see _key
        self._re: re.Pattern[str] | None = None

    # ---- collecting -------------------------------------------------------
    def add_host(self, name: Any) -> None:
        if not isinstance(name, str):
            return
        for part in re.split(r"[\s,]+", name.strip()):
            part = re.sub(r"^[A-Za-z][\w+.-]*://", "", part).split("/", 1)[0]  # tcp://h:29500/x -> h
            if part.startswith("[") and "]" in part:  # [v6]:port
                part = part[1 : part.index("]")]
            elif part.count(":") == 1:  # host:port
                part = part.split(":", 1)[0]
            low = part.lower()
            if low in _NOT_NAMES or len(low) < 2 or low in self.hosts or low.isdigit():
                continue
            self.hosts[low] = f"host{len(set(self.hosts.values()))}"
            short = low.split(".", 1)[0]
            if (
                short != low
                and len(short) >= 2
                and short not in self.hosts
                and not short.isdigit()
                and not IPV4_RE.fullmatch(low)
            ):
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

    def add_id(self, v: Any) -> None:
        if type(v) is int and v >= _MIN_ID and v not in self.ids and not ID_BASE <= v < ID_BASE + 10_000_000:
            self.ids.add(v)
            self._id_map = None
            self._memo.clear()

    def id_of(self, v: Any) -> Any:
        """The pseudonymous id of a learnt process/thread id; anything else unchanged."""
        if type(v) is not int or v not in self.ids:
            return v
        if self._id_map is None:
            self._id_map = {x: ID_BASE + i for i, x in enumerate(sorted(self.ids))}
        return self._id_map[v]

    def collect_events(self, events: Any) -> None:
        """Learn the process and thread ids of a Kineto profile's CPU events (not GPU devices/streams)."""
        if not isinstance(events, list):
            return
        for e in events:
            if type(e) is not dict or e.get("ph") == "M":
                continue
            cat = e.get("cat")
            if (isinstance(cat, str) and cat.lower() in GPU_CATS) or (cat == "ac2g" and e.get("ph") == "f"):
                continue
            self.add_id(e.get("pid"))
            self.add_id(e.get("tid"))

    def _id_text(self, m: re.Match[str]) -> str:
        v = int(m.group(2))
        return m.group(1) + str(self.id_of(v)) if v in self.ids else m.group(0)

    def learn_text(self, s: str) -> None:
        """Host names in rendezvous options and IP addresses, user names in home directories."""
        if "-" in s or "=" in s or "_" in s:
            for m in ENDPOINT_RE.finditer(s):
                self.add_host(m.group(1))
        if "." in s:
            for m in IPV4_RE.finditer(s):
                self.add_host(m.group(0))
        if ":" in s:
            for m in IPV6_RE.finditer(s):
                if is_ipv6(m.group(0)):
                    self.add_host(m.group(0))
        if "/" in s or "\\" in s:
            for m in HOME_RE.finditer(s):
                self.add_user(m.group(1))
        for m in _ID_TEXT_RE.finditer(s):  # "pid 4242" in a failure message
            self.add_id(int(m.group(2)))

    def _learn_hw(self, obj: Any) -> None:
        if isinstance(obj, dict):
            for v in obj.values():
                self._learn_hw(v)
        elif isinstance(obj, list):
            for v in obj:
                self._learn_hw(v)
        elif isinstance(obj, str) and len(obj) >= 3:
            self.hardware.add(obj)

    def collect(self, obj: Any, key: str = "") -> None:
        """Find host and user names in a JSON tree (keys and environment variables)."""
        kl = key.lower()
        if kl in HW_KEYS:
            self._learn_hw(obj)
            if isinstance(obj, dict):  # keyed by host (manifest gpus): the keys are not hardware
                for k in obj:
                    self.learn_text(str(k))
        elif isinstance(obj, dict):
            self._collect_dict(obj, key, kl)
        elif isinstance(obj, list):
            self._collect_list(obj, key, kl)
        elif type(obj) is int:
            if kl in ID_KEYS:
                self.add_id(obj)
        elif isinstance(obj, str):
            if kl in HOST_KEYS and kl != "node":
                self.add_host(obj)
            elif kl in USER_KEYS:
                self.add_user(obj)
            else:
                self.learn_text(obj)

    def _collect_dict(self, obj: dict[str, Any], key: str, kl: str) -> None:
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

    def _collect_list(self, obj: list[Any], key: str, kl: str) -> None:
        if kl in HOST_KEYS or kl in USER_KEYS:
            for v in obj:
                self.collect(v, key)
        elif len(obj) < 10_000:  # event lists hold no host/user keys worth a walk
            for i, v in enumerate(obj):
                if isinstance(v, str) and i + 1 < len(obj) and ENDPOINT_FLAG.fullmatch(v):
                    self.add_host(obj[i + 1])  # ["--master_addr", "node7"]
                self.collect(v, "")

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

    def _ip(self, m: re.Match[str]) -> str:
        ip = m.group(0)
        if ip in _NOT_NAMES or ip.startswith("127."):
            return ip
        if ip.lower() not in self.hosts:
            self.add_host(ip)
        return self.hosts.get(ip.lower(), ip)

    def _ip6(self, m: re.Match[str]) -> str:
        ip = m.group(0)
        if not is_ipv6(ip):
            return ip
        if ip.lower() not in self.hosts:
            self.add_host(ip)
        return self.hosts.get(ip.lower(), ip)

    def text(self, s: str) -> str:
        out = self._memo.get(s)
        if out is not None:
            return out
        out = s
        for w in self.redact:
            if w in out:
                out = out.replace(w, REDACT_TOKEN)
        if "/" in out or "\\" in out:
            for h in HOME_RE.finditer(out):
                if h.group(1).strip().lower() not in _NOT_NAMES and h.group(1) not in self.users:
                    self.add_user(h.group(1))
        if "/" in out or "\\" in out or "." in out:
            out = PATH_RE.sub(self._path, out)
        if "." in out:
            out = IPV4_RE.sub(self._ip, out)
        if "::" in out or out.count(":") >= 7:
            out = IPV6_RE.sub(self._ip6, out)
        pat = self._pattern()
        if pat is not None:
            out = pat.sub(self._word, out)
        if "-" in out and len(out) >= 36:
            out = UUID_RE.sub(self._uuid, out)
        if self.ids:
            out = _ID_TEXT_RE.sub(self._id_text, out)
        if len(self._memo) < 2_000_000:
            self._memo[s] = out
        return out

    def _uuid(self, m: re.Match[str]) -> str:
        """A device UUID's stable pseudonym (its ``GPU-`` form and its bare form map alike)."""
        bare = m.group(2).lower()
        n = self.uuids.setdefault(bare, len(self.uuids))
        return f"{m.group(1) or ''}00000000-0000-4000-8000-{n:012x}"

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
        elif kl in HW_KEYS:
            act = 5
        elif kl in ID_KEYS:
            act = 6
        else:
            act = 0
        return act, self.text(str(k))

    def hw_value(self, v: Any) -> Any:
        """A hardware value: strings kept verbatim; keys (host names in ``gpus``) cleaned."""
        if isinstance(v, dict):
            return {
                self.text(str(k)): (self.host_value(x) if str(k).lower() in HOST_KEYS else self.hw_value(x))
                for k, x in v.items()
            }
        if isinstance(v, list):
            return [self.hw_value(x) for x in v]
        if isinstance(v, str) and UUID_RE.search(v):
            return UUID_RE.sub(self._uuid, v)  # a device UUID identifies the device: a pseudonym
        if isinstance(v, str) and len(v) >= 3:
            self.hardware.add(v)
        return v

    def clean(self, obj: Any, key: str = "") -> Any:
        t = type(obj)
        if t is str:
            out = self._memo.get(obj)
            return out if out is not None else self.text(obj)
        if t is dict:
            return self._clean_dict(obj)
        if t is list:
            out_l = []
            for x in obj:
                if type(x) is dict and x.get("cat") in PY_CATS:
                    # kept (dropping them changes which CPU ops are leaves): paths in the name go
                    self.report.python_frames_cleaned += 1
                out_l.append(self.clean(x, key))
            return out_l
        return obj

    def _clean_dict(self, obj: dict[Any, Any]) -> dict[str, Any]:
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
            elif act == 5:
                res[ck] = self.hw_value(v)
            elif act == 6 and tv is int:
                res[ck] = self.id_of(v)
            else:
                res[ck] = self.clean(v, k)
        return res

    def leftovers(self, data: bytes) -> list[str]:
        """Removed strings still present in ``data`` (case-insensitive for names)."""
        low = data.lower()
        for hw in self.hardware:  # hardware names are kept on purpose (a host "a100", an "A100" GPU)
            if hw.lower() not in self.hosts and hw not in self.users:
                low = low.replace(hw.lower().encode(), b" ")
        # a name that is also a replacement (sanitizing a sanitized run: host0, user) is no leak
        tokens = {*self.hosts.values(), USER_TOKEN}
        names = [n for n in [*self.hosts, *(u.lower() for u in self.users)] if n not in tokens]
        found = [
            n for n in names if re.search(rb"(?<![a-z0-9_])" + re.escape(n.encode()) + rb"(?![a-z0-9_])", low)
        ]
        found += [w for w in self.redact if w.encode() in data]
        found += [p for p in self.paths if len(p) > 3 and p.encode() in data]
        return found

    def leaked_ids(self, doc: Any, key: str = "") -> list[int]:
        """Learnt process/thread ids still held under an id key of a JSON tree (a list's items are
        under the list's key). One walk with a stack of containers: the recursion it replaces
        built a list per value (10.8 M calls on the tests' profiles)."""
        ids = self.ids
        found: list[int] = []
        if not ids:
            return found
        id_key: dict[Any, bool] = {}
        stack: list[tuple[Any, bool]] = [(doc, key.lower() in ID_KEYS)]
        while stack:
            node, under = stack.pop()
            if type(node) is dict:
                for k, v in node.items():
                    flag = id_key.get(k)
                    if flag is None:
                        flag = id_key[k] = str(k).lower() in ID_KEYS
                    tv = type(v)
                    if tv is dict or tv is list:
                        stack.append((v, flag))
                    elif flag and tv is int and v in ids:
                        found.append(v)
            elif type(node) is list:
                for v in node:
                    tv = type(v)
                    if tv is dict or tv is list:
                        stack.append((v, under))
                    elif under and tv is int and v in ids:
                        found.append(v)
            elif under and type(node) is int and node in ids:
                found.append(node)
        return found


def collect_json(sc: Scrubber, doc: Any) -> None:
    if not isinstance(doc, dict):
        sc.collect(doc)
    else:
        for k, v in doc.items():
            if k in ("traceEvents", "nodes") and isinstance(v, list):
                if k == "traceEvents":
                    sc.collect_events(v)
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
