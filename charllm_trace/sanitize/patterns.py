"""The text patterns :mod:`charllm_trace.sanitize.rules` looks for: paths in every form, user
directories, IPv4 and IPv6 addresses, rendezvous endpoints on command lines."""

from __future__ import annotations

import re

_PC = r"[\w.@+~%-]"  # characters of a path component
_FILE_EXT = (
    r"py|pyc|pyx|ipynb|json|jsonl|ndjson|gz|zst|pt|pth|et|log|txt|yaml|yml|toml|cfg|ini|sh|csv|parquet|"
    r"arrow|so|cu|cuh|cpp|cc|c|h|hpp|bin|ckpt|safetensors|npz|npy|pkl|out|err"
)
_PCS = rf"{_PC}+(?: {_PC}+)*"  # a directory: words with single spaces (/home/John Smith/)
_W = r"[^\\/\s\"'<>|*?]+"  # characters of a Windows path component
_WS = rf"{_W}(?: {_W})*"
_SRC_EXT = r"py|pyx|pyi|ipynb|sh|cu|cuh|cpp|cc|hpp|yaml|yml|log|ckpt|pt|pth|safetensors"
PATH_RE = re.compile(
    "|".join(
        [
            r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+",  # file:// s3:// gs:// hdfs:// https:// tcp://
            rf"[A-Za-z]:[\\/](?:{_WS}[\\/])*(?:{_W})?",  # C:\Users\John Smith\x, C:/x
            rf"\\\\{_W}(?:\\{_WS}(?=\\))*(?:\\{_W})?",  # \\server\share\x (UNC)
            rf"(?:~|\.\.?)/(?:{_PCS}/)*(?:{_PC}+/?)?",  # ~/x ./x ../x
            rf"(?<![\w.:/\\-])/(?:{_PCS}/)*{_PC}+/?",  # /abs/path
            rf"(?<![\w.:/\\-])(?:{_PCS}/)+{_PC}*\.(?:{_FILE_EXT})\b",  # rel/dir/file.py
            rf"(?<![\w./\\-])[\w-]+(?:\.[\w-]+)*\.(?:{_SRC_EXT})(?![\w.])",  # model.py(42): forward
        ]
    )
)
#: the user directory in a path (/home/NAME/, /Users/NAME/, C:\Users\NAME\): NAME is a user name
HOME_RE = re.compile(r"(?:^|[/\\])(?:home|Users|users)[/\\]([^/\\\"'<>|]+?)(?=[/\\]|$)")
_IPV4 = r"(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)"
IPV4_RE = re.compile(rf"(?<![\w.]){_IPV4}(?![\w.])")
#: candidates for IPv6 addresses in free text (checked by :func:`is_ipv6` before use)
IPV6_RE = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")


def is_ipv6(s: str) -> bool:
    """An IPv6 address worth hiding: valid, not loopback/unspecified, and not a C++ name such as
    ``c10d::add`` (two short groups): compressed two-group forms count only with a routable or
    private prefix (``2001::5``, ``fe80::1``, ``fd12::9``)."""
    import ipaddress

    try:
        ip = ipaddress.IPv6Address(s)
    except ValueError:
        return False
    if ip.is_loopback or ip.is_unspecified:
        return False
    groups = [g for g in s.split(":") if g]
    if len(groups) >= 3:
        return True
    first = groups[0].lower() if groups and not s.startswith(":") else ""
    return len(first) == 4 and (
        first[0] in "23" or first.startswith(("fe8", "fe9", "fea", "feb", "fc", "fd"))
    )


#: a rendezvous option of a command line and its value (the host is learnt; the port is kept)
_ENDPOINT_OPT = (
    r"--(?:master[_-]addr(?:ess)?|rdzv[_-]endpoint|rendezvous[_-]endpoint|dist[_-]url|init[_-]method)"
)
ENDPOINT_RE = re.compile(
    rf"(?:{_ENDPOINT_OPT}|\b(?:MASTER_ADDR|RDZV_ENDPOINT|PET_MASTER_ADDR|PET_RDZV_ENDPOINT))(?:=|\s+)['\"]?([^\s'\",]+)",
    re.IGNORECASE,
)
ENDPOINT_FLAG = re.compile(rf"{_ENDPOINT_OPT}", re.IGNORECASE)

#: a device UUID (NVML's ``GPU-``/``MIG-`` form or bare, AMD SMI's): identifies one physical device
UUID_RE = re.compile(
    r"(?<![0-9A-Za-z])((?:GPU|MIG)-)?([0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})(?![0-9A-Za-z])"
)
