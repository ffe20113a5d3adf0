/* A small scanner for Chakra ET files: message framing and protobuf field scanning.
 *
 * setuptools builds this file when the package is installed (setup.py), as the
 * extension module charllm_trace.et._etscan, and charllm-trace calls its
 * functions through ctypes (et/_native.py, et/nodescan.py); it is required (a
 * missing module is an error), and numpy code in et/oracle.py is its test oracle. It only finds
 * where things are (offsets, lengths, varint values): every string stays in the
 * file buffer and all interpretation happens in Python/polars. Python's headers
 * serve only the module stub at the end.
 *
 * Error returns are negative; err[0] gets the message index and err[1] the byte
 * offset of the problem.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* first, as Python requires; used by the stub only */
#include "../core/_ctypes_stub.h"
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels refuse it and pages fault one by one */
#endif

/* Fault in the pages of bytes [from, to) of an output array ahead of the writes: one call per
 * chunk costs less than a page fault per 4 KiB page. Failures are harmless (the writes fault). */
static void populate(void *base, int64_t from, int64_t to) {
    const int64_t page = 4096;
    uintptr_t a = ((uintptr_t)base + (uintptr_t)from) & ~(uintptr_t)(page - 1);
    uintptr_t b = ((uintptr_t)base + (uintptr_t)to + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    if (b > a) (void)madvise((void *)a, (size_t)(b - a), MADV_POPULATE_WRITE);
}

#define POP_ROWS (1 << 18) /* rows of each output array faulted in at a time */

#define E_VARINT -1   /* a varint longer than 10 bytes */
#define E_PAST -2     /* a varint or field runs past the end of its message */
#define E_WIRETYPE -3 /* a group or invalid wire type */
#define E_MSG_PAST -4 /* a message runs past the end of the file */
#define E_LEN_PAST -5 /* a message length varint runs past the end of the file */
#define E_LEN_BAD -6  /* a message length varint longer than 10 bytes */

static inline int rd_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    int shift = 0;
    while (p < end) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            *pp = p;
            return 0;
        }
        shift += 7;
        if (shift > 63) return E_VARINT;
    }
    return E_PAST;
}

/* Skip a field's payload; for wire type 2 returns its offset and length. */
static inline int skip_field(const uint8_t **pp, const uint8_t *end, int wt, uint64_t *val,
                             const uint8_t **payload) {
    int rc;
    switch (wt) {
    case 0:
        return rd_varint(pp, end, val);
    case 1:
        if (end - *pp < 8) return E_PAST;
        memcpy(val, *pp, 8);
        *pp += 8;
        return 0;
    case 2:
        rc = rd_varint(pp, end, val);
        if (rc) return rc;
        if (*val > (uint64_t)(end - *pp)) return E_PAST;
        *payload = *pp;
        *pp += *val;
        return 0;
    case 5: {
        uint32_t v32;
        if (end - *pp < 4) return E_PAST;
        memcpy(&v32, *pp, 4);
        *val = v32;
        *pp += 4;
        return 0;
    }
    default:
        return E_WIRETYPE;
    }
}

/* Read one field at *pp (before end): its key, then its value (varint, fixed, or a length-delimited
 * payload); sets its field number, wire type, value and payload. 0, or an error code (a field
 * number 0 is one). */
static inline int next_field(const uint8_t **pp, const uint8_t *end, int *field, int *wt, uint64_t *val,
                             const uint8_t **payload) {
    uint64_t tag = 0;
    *val = 0;
    *payload = NULL;
    int rc = rd_varint(pp, end, &tag);
    if (!rc) rc = skip_field(pp, end, (int)(tag & 7), val, payload);
    if (!rc && (tag >> 3) == 0) rc = E_WIRETYPE;
    *field = (int)(tag >> 3);
    *wt = (int)(tag & 7);
    return rc;
}

/* Strict UTF-8 check (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF) of
 * n byte ranges. Returns the index of the first invalid range, or -1. */
static inline int utf8_ok(const uint8_t *s, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        /* ASCII fast path: 32, then 8 bytes at a time */
        while (i + 32 <= n) {
            uint64_t w[4];
            memcpy(w, s + i, 32);
            if ((w[0] | w[1] | w[2] | w[3]) & 0x8080808080808080ULL) break;
            i += 32;
        }
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c == 0xE0) {
            need = 2;
            lo = 0xA0;
        } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
            need = 2;
        } else if (c == 0xED) {
            need = 2;
            hi = 0x9F;
        } else if (c == 0xF0) {
            need = 3;
            lo = 0x90;
        } else if (c >= 0xF1 && c <= 0xF3) {
            need = 3;
        } else if (c == 0xF4) {
            need = 3;
            hi = 0x8F;
        } else {
            return 0;
        }
        if (i + need >= n) return 0; /* the sequence is cut by the end of the string */
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += need + 1;
    }
    return 1;
}

/* utf8_ok with a fast path: most text is ASCII, checked 8 bytes at a time without branches. */
static inline int text_ok(const uint8_t *s, int64_t n) {
    uint64_t acc = 0;
    if (n >= 8) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            acc |= w;
        }
        uint64_t w;
        memcpy(&w, s + n - 8, 8);
        acc |= w;
    } else {
        for (int64_t i = 0; i < n; i++) acc |= s[i];
    }
    if (!(acc & 0x8080808080808080ULL)) return 1;
    return utf8_ok(s, n);
}

/* One Arrow binary view (16 bytes) of data[off : off + len]; buffer k is the window of the
 * data that starts at k * step (see _arrow.py). */
static inline void put_view(uint8_t *v, const uint8_t *data, int64_t off, int64_t len, int64_t step) {
    int32_t l = (int32_t)len;
    memset(v, 0, 16);
    memcpy(v, &l, 4);
    if (l <= 12) {
        if (l > 0) memcpy(v + 4, data + off, (size_t)l);
    } else {
        int32_t b = (int32_t)(off / step), o = (int32_t)(off % step);
        memcpy(v + 4, data + off, 4);
        memcpy(v + 8, &b, 4);
        memcpy(v + 12, &o, 4);
    }
}

/* ---------------------------------------------------------------------------------------
 * et_scan: one pass over the Node messages from data[pos] to data[size], resumable; it stops
 * before the first message that starts at or after `stop` (et_walk finds the same message).
 *
 * Output arrays are caller-allocated with capacities cap[0] (nodes), cap[1] (dependencies),
 * cap[2] (attributes), cap[3] (distinct attribute names). When one would overflow, the scan
 * stops before the current message and returns 1: the caller grows the arrays and calls
 * again with the same state. Returns 0 when done, < 0 on corrupt input (err[0] = message
 * index counted from the first node, err[1] = byte offset).
 *
 * state: [0] byte position, [1] nodes, [2] deps, [3] attrs, [4] distinct names,
 *   [6..8] rows of the node, dependency and attribute arrays already faulted in (0 at first,
 *   the used rows after the caller grows the arrays),
 *   [5] text that is not strict UTF-8, by field: bit 0 the node name, bits 1-6 inputs
 *   values/shapes/types and outputs values/shapes/types, bit 7 a string attribute value
 *   (every text field is checked as it is passed; the scan goes on to the end).
 * Per node: id, type, start_us, dur_us, io_present (2 per node), and the Arrow binary views
 *   (16 bytes) of its 7 text fields in views[0..6] (name, inputs values/shapes/types, outputs
 *   values/shapes/types; an absent field is the empty string). View buffers are windows of
 *   the data every `step` bytes (see _arrow.py).
 * Per dependency: dep_node (the node's id), dep_val, dep_kind (0 ctrl, 1 data).
 * Per attribute: attr_node (node index), attr_code (index of its name), vfield/vwt/vval/voff
 *   (its value: the last oneof field; vval is the varint or fixed value, or the payload length;
 *   voff the payload offset), akind (0 none, 1 int, 2 bool, 3 string, 4 other); for ints and
 *   bools voff holds the value itself, as int64.
 * Per distinct name: name_off/name_len (first occurrence); names_ht is an open-addressing
 *   table of HT int32 slots (caller zeroes it once; it holds code + 1).
 * ------------------------------------------------------------------------------------- */
#define E_NAMES -11  /* more distinct attribute names than the caller's table holds */
#define E_BIGSTR -12 /* a text field of `step` bytes or more */
#define E_NODES -13  /* more than 2^31 - 1 nodes in one part */
/* In et_scan: stop at the node being read (`n`), at byte `at` of the data, with error `code`. */
#define FAIL_AT(at, code) \
    do {                  \
        err[0] = n;       \
        err[1] = (at);    \
        return (code);    \
    } while (0)
/* In et_scan: declare (f, w, v, pl) and read the next field of [p, end) into them (next_field),
 * or stop at the byte where it failed. */
#define READ_FIELD(p, end, f, w, v, pl)                 \
    uint64_t v;                                         \
    const uint8_t *pl;                                  \
    int f, w;                                           \
    rc = next_field(&(p), (end), &(f), &(w), &(v), &(pl)); \
    if (rc) FAIL_AT((p) - data, rc)

/* A hash of an attribute name: its length and first and last 8 bytes, mixed. */
static inline uint64_t name_hash(const uint8_t *p, uint64_t n) {
    uint64_t a = 0, b = 0;
    memcpy(&a, p, n < 8 ? n : 8);
    if (n > 8) memcpy(&b, p + n - 8, 8);
    uint64_t h = (a ^ (b * 0x9E3779B97F4A7C15ULL) ^ n) * 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 31);
}

int64_t et_scan(const uint8_t *data, int64_t size, int64_t *state, const int64_t *cap,
                uint64_t *id, uint64_t *type, uint64_t *start_us, uint64_t *dur_us,
                uint8_t **views, uint8_t *io_present,
                int64_t *dep_node, uint64_t *dep_val, uint8_t *dep_kind,
                int32_t *attr_node, int32_t *attr_code, int8_t *vfield, int8_t *vwt,
                uint64_t *vval, int64_t *voff, int8_t *akind,
                int64_t *uname_off, int64_t *uname_len,
                int32_t *names_ht, int64_t ht_size, int64_t step, int64_t stop, int64_t *err) {
    int64_t pos = state[0], n = state[1], nd = state[2], na = state[3], nn = state[4];
    int64_t bad = state[5];
    int more = 0;
    int64_t *pop = state + 6; /* rows faulted in so far: nodes, deps, attributes */
    while (pos < size && pos < stop) {
        const uint8_t *p = data + pos, *fend = data + size;
        uint64_t mlen;
        int rc = rd_varint(&p, fend, &mlen);
        if (rc) FAIL_AT(p - data, rc == E_PAST ? E_LEN_PAST : E_LEN_BAD);
        if (mlen > (uint64_t)(fend - p)) FAIL_AT(p - data, E_MSG_PAST);
        if (n >= cap[0]) goto grow;
        if (n >= INT32_MAX) FAIL_AT(pos, E_NODES); /* attribute rows hold 32-bit node indices */
        const uint8_t *end = p + mlen;
        int64_t nd0 = nd, na0 = na;
        uint64_t scalar[8] = {0}; /* the varint fields by number: [1] id, [3] type, [6] start, [7] dur */
        /* text fields: [0] name, [1..6] inputs values/shapes/types, outputs values/shapes/types */
        int64_t toff[7] = {0}, tlen[7] = {0};
        uint8_t pres[2] = {0, 0};
        while (p < end) {
            READ_FIELD(p, end, field, wt, val, payload);
            switch (field) {
            case 1:
            case 3:
            case 6:
            case 7:
                if (wt == 0) scalar[field] = val;
                break;
            case 2:
                if (wt == 2) {
                    toff[0] = payload - data;
                    tlen[0] = (int64_t)val;
                }
                break;
            case 4:
            case 5:
                if (wt == 0) {
                    if (nd >= cap[1]) goto rollback;
                    dep_val[nd] = val;
                    dep_kind[nd] = (uint8_t)(field - 4);
                    nd++;
                } else if (wt == 2) {
                    /* packed: at most one value per byte, so one capacity check covers them all */
                    const uint8_t *q = payload, *qe = payload + val;
                    if (nd + (int64_t)val > cap[1]) goto rollback;
                    int64_t first_dep = nd;
                    while (q < qe) {
                        uint64_t v = q[0];
                        if (v < 0x80) {
                            q += 1;
                        } else if (qe - q >= 3 && q[1] < 0x80) {
                            v = (v & 0x7f) | (uint64_t)q[1] << 7;
                            q += 2;
                        } else if (qe - q >= 3 && q[2] < 0x80) {
                            v = (v & 0x7f) | (uint64_t)(q[1] & 0x7f) << 7 | (uint64_t)q[2] << 14;
                            q += 3;
                        } else {
                            rc = rd_varint(&q, qe, &v);
                            if (rc) FAIL_AT(q - data, rc);
                        }
                        dep_val[nd++] = v;
                    }
                    memset(dep_kind + first_dep, field - 4, (size_t)(nd - first_dep));
                }
                break;
            case 8:
            case 9:
                if (wt == 2) {
                    int w = field - 8;
                    pres[w] = 1;
                    for (int k = 1; k <= 3; k++) toff[w * 3 + k] = tlen[w * 3 + k] = 0;
                    const uint8_t *q = payload, *qe = payload + val;
                    while (q < qe) {
                        READ_FIELD(q, qe, f2, w2, v2, pl2);
                        if (w2 == 2 && f2 >= 1 && f2 <= 3) {
                            toff[w * 3 + f2] = pl2 - data;
                            tlen[w * 3 + f2] = (int64_t)v2;
                        }
                    }
                }
                break;
            case 10:
                if (wt == 2) {
                    if (na >= cap[2]) goto rollback;
                    const uint8_t *q = payload, *qe = payload + val;
                    const uint8_t *nm = (const uint8_t *)"";
                    uint64_t nlen = 0;
                    int32_t vf = 0;
                    int8_t vw = 0;
                    uint64_t vv = 0;
                    int64_t vo = 0;
                    while (q < qe) {
                        READ_FIELD(q, qe, f2, w2, v2, pl2);
                        if (f2 == 1 && w2 == 2) {
                            nm = pl2;
                            nlen = v2;
                        } else if (f2 >= 3 && f2 <= 32) {
                            vf = f2;
                            vw = (int8_t)w2;
                            vv = v2;
                            vo = pl2 ? pl2 - data : 0;
                        }
                    }
                    /* the name's code: look it up, or add it */
                    uint64_t h = name_hash(nm, nlen);
                    int64_t slot = (int64_t)(h & (uint64_t)(ht_size - 1));
                    int32_t code = -1;
                    for (;;) {
                        int32_t c = names_ht[slot];
                        if (c == 0) break;
                        c -= 1;
                        if ((uint64_t)uname_len[c] == nlen && memcmp(data + uname_off[c], nm, nlen) == 0) {
                            code = c;
                            break;
                        }
                        slot = (slot + 1) & (ht_size - 1);
                    }
                    if (code < 0) {
                        if (nn >= cap[3] || 2 * (nn + 1) > ht_size) FAIL_AT(q - data, E_NAMES);
                        code = (int32_t)nn;
                        uname_off[nn] = nlen ? nm - data : 0;
                        uname_len[nn] = (int64_t)nlen;
                        names_ht[slot] = code + 1;
                        nn++;
                    }
                    attr_node[na] = (int32_t)n;
                    attr_code[na] = code;
                    vfield[na] = (int8_t)vf;
                    vwt[na] = vw;
                    vval[na] = vv;
                    voff[na] = vo;
                    /* value kind (0 none, 1 int, 2 bool, 3 string, 4 other) and integer value */
                    {
                        int8_t k = 4;
                        int64_t iv = (int64_t)vv;
                        if (vf == 0) k = 0;
                        else if (vw == 0 && (vf == 7 || vf == 9 || vf == 11)) k = 1;
                        else if (vw == 0 && vf == 13) k = vv >> 63 ? 4 : 1;
                        else if (vw == 0 && (vf == 15 || vf == 17)) {
                            iv = (int64_t)(vv >> 1) ^ -(int64_t)(vv & 1);
                            k = 1;
                        } else if (vw == 5 && vf == 19) {
                            iv = (int64_t)(uint32_t)vv;
                            k = 1;
                        } else if (vw == 5 && vf == 23) {
                            iv = (int64_t)(int32_t)(uint32_t)vv;
                            k = 1;
                        } else if (vw == 1 && vf == 21) k = vv >> 63 ? 4 : 1;
                        else if (vw == 1 && vf == 25) k = 1;
                        else if (vw == 0 && vf == 27) {
                            iv = vv != 0;
                            k = 2;
                        } else if (vw == 2 && vf == 29) {
                            k = 3;
                            if (vv && !text_ok(data + vo, (int64_t)vv)) bad |= 1 << 7;
                        }
                        akind[na] = k;
                        if (k == 1 || k == 2) voff[na] = iv; /* the value takes the offset's place */
                    }
                    na++;
                }
                break;
            default:
                break;
            }
        }
        /* the node is complete: its scalars, text views (checked) and dependency owners */
        id[n] = scalar[1];
        type[n] = scalar[3];
        start_us[n] = scalar[6];
        dur_us[n] = scalar[7];
        io_present[2 * n] = pres[0];
        io_present[2 * n + 1] = pres[1];
        for (int k = 0; k < 7; k++) {
            if (tlen[k] >= step) FAIL_AT(toff[k], E_BIGSTR);
            if (tlen[k] && !text_ok(data + toff[k], tlen[k])) bad |= (int64_t)1 << k;
            put_view(views[k] + 16 * n, data, toff[k], tlen[k], step);
        }
        for (int64_t k = nd0; k < nd; k++) dep_node[k] = (int64_t)scalar[1];
        n++;
        pos = end - data;
        /* fault in the next rows of the big output arrays before the writes reach them */
        if (pop[1] < cap[1] && nd + POP_ROWS / 4 > pop[1]) {
            int64_t to = pop[1] + POP_ROWS < cap[1] ? pop[1] + POP_ROWS : cap[1];
            populate(dep_node, 8 * pop[1], 8 * to);
            populate(dep_val, 8 * pop[1], 8 * to);
            populate(dep_kind, pop[1], to);
            pop[1] = to;
        }
        if (pop[2] < cap[2] && na + POP_ROWS / 4 > pop[2]) {
            int64_t to = pop[2] + POP_ROWS < cap[2] ? pop[2] + POP_ROWS : cap[2];
            populate(attr_node, 4 * pop[2], 4 * to);
            populate(attr_code, 4 * pop[2], 4 * to);
            populate(vfield, pop[2], to);
            populate(vwt, pop[2], to);
            populate(vval, 8 * pop[2], 8 * to);
            populate(voff, 8 * pop[2], 8 * to);
            populate(akind, pop[2], to);
            pop[2] = to;
        }
        if (pop[0] < cap[0] && n + POP_ROWS / 16 > pop[0]) {
            int64_t to = pop[0] + POP_ROWS / 4 < cap[0] ? pop[0] + POP_ROWS / 4 : cap[0];
            populate(id, 8 * pop[0], 8 * to);
            populate(type, 8 * pop[0], 8 * to);
            populate(start_us, 8 * pop[0], 8 * to);
            populate(dur_us, 8 * pop[0], 8 * to);
            populate(io_present, 2 * pop[0], 2 * to);
            for (int k = 0; k < 7; k++) populate(views[k], 16 * pop[0], 16 * to);
            pop[0] = to;
        }
        continue;
    rollback:
        nd = nd0;
        na = na0;
    grow:
        more = 1;
        break;
    }
    state[0] = pos;
    state[1] = n;
    state[2] = nd;
    state[3] = na;
    state[4] = nn;
    state[5] = bad;
    return more; /* 1: the caller grows the arrays and calls again */
}

/* Arrow binary-view structs for n slices of data (16 bytes each, see _arrow.py). */
void et_views(const uint8_t *data, const int64_t *off, const int64_t *len, int64_t n,
              uint8_t *views, int64_t step) {
    for (int64_t i = 0; i < n; i++) {
        uint8_t *v = views + 16 * i;
        int32_t l = (int32_t)len[i];
        memset(v, 0, 16);
        memcpy(v, &l, 4);
        if (l <= 12) {
            if (l > 0) memcpy(v + 4, data + off[i], (size_t)l);
        } else {
            int32_t b = (int32_t)(off[i] / step), o = (int32_t)(off[i] % step);
            memcpy(v + 4, data + off[i], 4);
            memcpy(v + 8, &b, 4);
            memcpy(v + 12, &o, 4);
        }
    }
}

/* The ``attrs`` JSON object text of every node, written the way orjson writes it.
 * Attributes 0..na-1 are in node order; those with skip[i] set are left out (they became
 * columns). kind: 0 null, 1 int, 2 bool, 3 string (escaped; copied verbatim when json_code[code]
 * is set: the value is JSON text already), 4 pre-rendered text (the k-th kind-4 attribute not
 * skipped is pybuf[pyoff[k] : pyoff[k + 1]]).
 * With out == NULL returns an upper bound of the bytes needed; else fills out and, per node with
 * attributes left, its binary view (views: 16 bytes per node, zeroed by the caller) and its bit
 * in the validity bitmap (valid, zeroed by the caller), and returns the bytes written. Returns -10
 * when a node has the same key twice (the caller handles that case), -12 when one node's text is
 * `step` bytes or more. */
static const char HEX[] = "0123456789abcdef";

/* Whether any of the 8 bytes of w is a control character, '"' or a backslash (exact). */
static inline int needs_escape(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t lt20 = (w - ones * 0x20) & ~w & high;
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    uint64_t eq = ((q - ones) & ~q & high) | ((b - ones) & ~b & high);
    return (lt20 | eq) != 0;
}

static inline int64_t put(uint8_t *out, int64_t at, const void *src, int64_t n) {
    memcpy(out + at, src, (size_t)n);
    return at + n;
}

int64_t et_json(const uint8_t *data, int64_t na, const uint8_t *skip, const int32_t *node,
                const int8_t *kind, const int64_t *ival, const int64_t *soff, const int64_t *slen,
                const int32_t *code, const uint8_t *json_code, const uint8_t *keybuf,
                const int64_t *keyoff, const uint8_t *pybuf, const int64_t *pyoff, uint8_t *out,
                uint8_t *views, uint8_t *valid, int64_t step) {
    int64_t npy = 0;
    if (!out) {
        int64_t b = 2;
        for (int64_t i = 0; i < na; i++) {
            if (skip[i]) continue;
            int k = kind[i];
            if (k == 3 && json_code[code[i]]) k = 5;
            b += keyoff[code[i] + 1] - keyoff[code[i]] + 4; /* key, ':', ',' and braces */
            switch (k) {
            case 1: b += 20; break;
            case 2: b += 5; break;
            case 3: b += 2 + 6 * slen[i]; break;
            case 4: b += pyoff[npy + 1] - pyoff[npy]; npy++; break;
            case 5: b += slen[i]; break;
            default: b += 4;
            }
        }
        return b;
    }
    int64_t at = 0, r = 0;
    while (r < na) {
        int64_t nd = node[r], first = r;
        while (r < na && node[r] == nd) r++;
        /* any attribute left in this node? the same key twice? */
        int any = 0;
        for (int64_t x = first; x < r; x++) {
            if (skip[x]) continue;
            any = 1;
            for (int64_t y = first; y < x; y++)
                if (!skip[y] && code[x] == code[y]) return -10;
        }
        if (!any) continue;
        int64_t begin = at;
        out[at++] = '{';
        for (int64_t i = first; i < r; i++) {
            if (skip[i]) continue;
            if (at > begin + 1) out[at++] = ',';
            at = put(out, at, keybuf + keyoff[code[i]], keyoff[code[i] + 1] - keyoff[code[i]]);
            out[at++] = ':';
            int k = kind[i];
            if (k == 3 && json_code[code[i]]) k = 5;
            switch (k) {
            case 1: {
                char tmp[24];
                int len = 24;
                uint64_t u = ival[i] < 0 ? (uint64_t)0 - (uint64_t)ival[i] : (uint64_t)ival[i];
                do {
                    tmp[--len] = (char)('0' + u % 10);
                    u /= 10;
                } while (u);
                if (ival[i] < 0) tmp[--len] = '-';
                at = put(out, at, tmp + len, 24 - len);
                break;
            }
            case 2:
                at = ival[i] ? put(out, at, "true", 4) : put(out, at, "false", 5);
                break;
            case 3: {
                const uint8_t *s = data + soff[i];
                out[at++] = '"';
                for (int64_t k2 = 0; k2 < slen[i]; k2++) {
                    /* copy the run of bytes that need no escaping in one go (8 bytes at a time) */
                    int64_t run = k2;
                    while (run + 8 <= slen[i]) {
                        uint64_t w;
                        memcpy(&w, s + run, 8);
                        if (needs_escape(w)) break;
                        run += 8;
                    }
                    while (run < slen[i] && s[run] >= 0x20 && s[run] != '"' && s[run] != '\\') run++;
                    if (run > k2) {
                        at = put(out, at, s + k2, run - k2);
                        k2 = run - 1;
                        continue;
                    }
                    uint8_t c = s[k2];
                    if (c == '"') at = put(out, at, "\\\"", 2);
                    else if (c == '\\') at = put(out, at, "\\\\", 2);
                    else if (c == '\n') at = put(out, at, "\\n", 2);
                    else if (c == '\r') at = put(out, at, "\\r", 2);
                    else if (c == '\t') at = put(out, at, "\\t", 2);
                    else if (c == '\b') at = put(out, at, "\\b", 2);
                    else if (c == '\f') at = put(out, at, "\\f", 2);
                    else {
                        char u[6] = {'\\', 'u', '0', '0', HEX[c >> 4], HEX[c & 15]};
                        at = put(out, at, u, 6);
                    }
                }
                out[at++] = '"';
                break;
            }
            case 4:
                at = put(out, at, pybuf + pyoff[npy], pyoff[npy + 1] - pyoff[npy]);
                npy++;
                break;
            case 5:
                at = put(out, at, data + soff[i], slen[i]);
                break;
            default:
                at = put(out, at, "null", 4);
            }
        }
        out[at++] = '}';
        if (at - begin >= step) return -12;
        put_view(views + 16 * nd, out, begin, at - begin, step);
        valid[nd >> 3] |= (uint8_t)(1 << (nd & 7));
    }
    return at;
}

/* Group attribute rows by name code, for the codes with want[code] set: a counting sort.
 * start has ncodes + 1 entries; the rows of code c are rows[start[c] : start[c + 1]], ascending.
 * With rows == NULL only start is filled (start[ncodes] is the number of rows to hold). */
void et_group(const int32_t *code, int64_t na, const uint8_t *want, int64_t ncodes, int64_t *start,
              int64_t *rows) {
    memset(start, 0, sizeof(int64_t) * (size_t)(ncodes + 1));
    for (int64_t i = 0; i < na; i++)
        if (want[code[i]]) start[code[i] + 1]++;
    for (int64_t c = 0; c < ncodes; c++) start[c + 1] += start[c];
    if (!rows) return;
    int64_t *fill = start; /* fill[c] advances from start[c] to start[c + 1] */
    for (int64_t i = 0; i < na; i++)
        if (want[code[i]]) rows[fill[code[i]]++] = i;
    for (int64_t c = ncodes; c > 0; c--) start[c] = start[c - 1]; /* restore the starts */
    start[0] = 0;
}

/* Walk the framing from pos until the first message starting at or after target.
 * out[0] = that position, out[1] = messages skipped. Returns 0, or < 0 on bad framing. */
int64_t et_walk(const uint8_t *data, int64_t size, int64_t pos, int64_t target, int64_t *out) {
    int64_t k = 0;
    while (pos < size && pos < target) {
        const uint8_t *p = data + pos;
        uint64_t len;
        int rc = rd_varint(&p, data + size, &len);
        if (rc) return rc;
        if (len > (uint64_t)(data + size - p)) return E_MSG_PAST;
        pos = (p - data) + (int64_t)len;
        k++;
    }
    out[0] = pos;
    out[1] = k;
    return 0;
}

/* Whether data[pos..] starts with a length-delimited message whose fields are all Chakra Node
 * fields of the right wire type (1 id, 2 name, 3 type, 4/5 deps, 6/7 times, 8/9 inputs/outputs,
 * 10 attributes); on success *next is the position after it. */
static int plausible_node(const uint8_t *data, int64_t size, int64_t pos, int64_t *next) {
    const uint8_t *p = data + pos, *fend = data + size;
    uint64_t len;
    if (rd_varint(&p, fend, &len) || len > (uint64_t)(fend - p)) return 0;
    const uint8_t *end = p + len;
    while (p < end) {
        uint64_t tag, val = 0;
        const uint8_t *payload = NULL;
        if (rd_varint(&p, end, &tag)) return 0;
        int f = (int)(tag >> 3), wt = (int)(tag & 7);
        int ok = (wt == 0 && (f == 1 || f == 3 || f == 4 || f == 5 || f == 6 || f == 7)) ||
                 (wt == 2 && (f == 2 || f == 4 || f == 5 || (f >= 8 && f <= 10)));
        if (!ok || skip_field(&p, end, wt, &val, &payload)) return 0;
    }
    *next = end - data;
    return 1;
}

/* A guess of a message boundary near target without walking the framing from the start: from
 * the first position after target where `need` consecutive plausible Node messages follow, the
 * start of the `skip`-th of them (a chain that starts inside a message soon runs into the true
 * boundaries). It is only a guess: the caller checks it against the boundary the scan of the
 * preceding part stops at. Returns the position, or -1 when none is found within `limit` bytes
 * (or the data ends first). */
int64_t et_resync(const uint8_t *data, int64_t size, int64_t target, int64_t need, int64_t skip,
                  int64_t limit) {
    for (int64_t q = target; q < size && q < target + limit; q++) {
        int64_t pos = q, k = 0, at = -1;
        while (k < need && pos < size) {
            if (k == skip) at = pos;
            if (!plausible_node(data, size, pos, &pos)) break;
            k++;
        }
        if (k == need && at >= 0) return at;
    }
    return -1;
}

int64_t et_utf8(const uint8_t *data, const int64_t *off, const int64_t *len, int64_t n) {
    for (int64_t r = 0; r < n; r++)
        if (len[r] > 0 && !utf8_ok(data + off[r], len[r])) return r;
    return -1;
}

/* ---- extension-module stub (core/_ctypes_stub.h) ---- */
CHARLLM_CTYPES_STUB(_etscan)
