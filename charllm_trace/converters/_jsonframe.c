/* Streaming framing of a JSON document's top level (charllm-trace's Kineto reader).
 *
 * setuptools builds this file when the package is installed (setup.py), as the extension
 * module charllm_trace.converters._jsonframe, and charllm-trace calls jf_scan through
 * ctypes (converters/jsonframe.py); its numpy twin (converters/jsonframe_oracle.py) is only the
 * tests' oracle. The same module holds the event decoder (_jsondecode.c, compiled with it).
 * It reads the document chunk by chunk, keeping its state (nesting depth, inside a
 * string, after a backslash) between calls, and reports only the structure near the
 * top: where the top-level object's members, keys and depth-1 containers begin and
 * end, and the commas that separate the elements of a depth-1 array (the events of
 * ``traceEvents``). Nothing is decoded here: _jsondecode.c (or msgspec) decodes the slices.
 *
 * Emitted, with the depth before the byte:
 *   '{' '['   at depth <= 1        '}' ']'   at depth <= 2
 *   ','       at depth <= 2        ':'       at depth == 1
 *   '"'       opening or closing a string at depth == 1
 * Python's headers serve only the module stub at the end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* first, as Python requires; used by the stub only */
#include "../core/_ctypes_stub.h"
#include <stdint.h>
#include <string.h>

#include "_swar.h"

/* the bytes that matter outside strings */
static const uint8_t special[256] = {['"'] = 1, ['{'] = 1, ['['] = 1, ['}'] = 1, [']'] = 1, [','] = 1, [':'] = 1};

/* Scan b[0..n). st = {depth, in_string, escaped}. Writes at most cap events (absolute
 * position base + i, the byte, the depth before it) and returns how many; *consumed gets
 * the number of bytes scanned (n unless cap ran out first). */
int64_t jf_scan(const uint8_t *b, int64_t n, int64_t *st, int64_t base, int64_t *pos, uint8_t *code,
                int8_t *dep, int64_t cap, int64_t *consumed) {
    int64_t d = st[0];
    int ins = (int)st[1], esc = (int)st[2];
    int64_t k = 0, i = 0;
#define EMIT(c)                                            \
    do {                                                   \
        pos[k] = base + i;                                 \
        code[k] = (c);                                     \
        dep[k] = (int8_t)(d < -1 ? -1 : (d > 3 ? 3 : d)); \
        k++;                                               \
    } while (0)
    while (i < n && k < cap) {
        uint8_t c = b[i];
        if (ins) {
            if (esc) {
                esc = 0;
                i++;
                continue;
            }
            while (i + 8 <= n && !jf_quote_or_bs(jf_load(b + i))) i += 8; /* plain string bytes */
            if (i == n) goto out;
            c = b[i];
            while (c != '"' && c != '\\') {
                if (++i == n) goto out;
                c = b[i];
            }
            if (c == '\\') {
                esc = 1;
            } else {
                ins = 0;
                if (d == 1) EMIT(c);
            }
            i++;
            continue;
        }
        while (!special[c]) { /* numbers, literals, whitespace */
            if (++i == n) goto out;
            c = b[i];
        }
        switch (c) {
        case '"':
            ins = 1;
            if (d == 1) EMIT(c);
            break;
        case '{':
        case '[':
            if (d <= 1) EMIT(c);
            d++;
            break;
        case '}':
        case ']':
            if (d <= 2) EMIT(c);
            d--;
            break;
        case ',':
            if (d <= 2) EMIT(c);
            break;
        case ':':
            if (d == 1) EMIT(c);
            break;
        default:
            break;
        }
        i++;
    }
out:
#undef EMIT
    st[0] = d;
    st[1] = ins;
    st[2] = esc;
    *consumed = i;
    return k;
}

/* ---- extension-module stub (core/_ctypes_stub.h) ---- */
CHARLLM_CTYPES_STUB(_jsonframe)
