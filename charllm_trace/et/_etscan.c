/* A small scanner for Chakra ET files: message framing and protobuf field scanning.
 *
 * charllm-trace compiles this file on first use (cc -O2 -shared) and calls it
 * through ctypes; without a C compiler the same work is done by numpy code in
 * fastdecode.py. It only finds where things are (offsets, lengths, varint
 * values): every string stays in the file buffer and all interpretation happens
 * in Python/polars. No Python headers are needed.
 *
 * Error returns are negative; err[0] gets the message index and err[1] the byte
 * offset of the problem.
 */
#include <stdint.h>
#include <string.h>

#define E_VARINT -1   /* a varint longer than 10 bytes */
#define E_PAST -2     /* a varint or field runs past the end of its message */
#define E_WIRETYPE -3 /* a group or invalid wire type */
#define E_MSG_PAST -4 /* a message runs past the end of the file */

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

/* Framing: varint length + message, repeated. starts/lens may be NULL (count only). */
int64_t et_frame(const uint8_t *data, int64_t size, int64_t *starts, int64_t *lens, int64_t *err) {
    const uint8_t *p = data, *end = data + size;
    int64_t k = 0;
    while (p < end) {
        uint64_t len;
        int rc = rd_varint(&p, end, &len);
        if (rc) {
            err[0] = k;
            err[1] = p - data;
            return rc;
        }
        if (len > (uint64_t)(end - p)) {
            err[0] = k;
            err[1] = p - data;
            return E_MSG_PAST;
        }
        if (starts) {
            starts[k] = p - data;
            lens[k] = (int64_t)len;
        }
        p += len;
        k++;
    }
    return k;
}

/* Node messages. With ctrl_val == NULL only counts[0..2] (ctrl deps, data deps, attrs) are filled.
 * io_off/io_len: n*6 (inputs values/shapes/types, outputs values/shapes/types); io_present: n*2. */
int64_t et_nodes(const uint8_t *data, const int64_t *starts, const int64_t *lens, int64_t n,
                 uint64_t *id, uint64_t *type, uint64_t *start_us, uint64_t *dur_us,
                 int64_t *name_off, int64_t *name_len, uint8_t *io_present, int64_t *io_off,
                 int64_t *io_len, int64_t *ctrl_node, uint64_t *ctrl_val, int64_t *data_node,
                 uint64_t *data_val, int64_t *attr_node, int64_t *attr_off, int64_t *attr_len,
                 int64_t *counts, int64_t *err) {
    int fill = ctrl_val != NULL;
    int64_t nc = 0, nd = 0, na = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = data + starts[i], *end = p + lens[i];
        while (p < end) {
            uint64_t tag, val = 0;
            const uint8_t *payload = NULL;
            int rc = rd_varint(&p, end, &tag);
            if (!rc) rc = skip_field(&p, end, (int)(tag & 7), &val, &payload);
            if (!rc && (tag >> 3) == 0) rc = E_WIRETYPE;
            if (rc) {
                err[0] = i;
                err[1] = p - data;
                return rc;
            }
            int field = (int)(tag >> 3), wt = (int)(tag & 7);
            if (field == 4 || field == 5) {
                int64_t *cnt = field == 4 ? &nc : &nd;
                int64_t *own = field == 4 ? ctrl_node : data_node;
                uint64_t *dst = field == 4 ? ctrl_val : data_val;
                if (wt == 0) {
                    if (fill) {
                        own[*cnt] = i;
                        dst[*cnt] = val;
                    }
                    (*cnt)++;
                } else if (wt == 2 && !fill) {
                    /* count only: one varint ends at every byte below 0x80 */
                    if (val && (payload[val - 1] & 0x80)) {
                        err[0] = i;
                        err[1] = payload + val - data;
                        return E_PAST;
                    }
                    for (uint64_t k = 0; k < val; k++) *cnt += payload[k] < 0x80;
                } else if (wt == 2) {
                    const uint8_t *q = payload, *qe = payload + val;
                    while (q < qe) {
                        uint64_t v;
                        rc = rd_varint(&q, qe, &v);
                        if (rc) {
                            err[0] = i;
                            err[1] = q - data;
                            return rc;
                        }
                        if (fill) {
                            own[*cnt] = i;
                            dst[*cnt] = v;
                        }
                        (*cnt)++;
                    }
                }
                continue;
            }
            if (field == 10 && wt == 2) {
                if (fill) {
                    attr_node[na] = i;
                    attr_off[na] = payload - data;
                    attr_len[na] = (int64_t)val;
                }
                na++;
                continue;
            }
            if (!fill) continue;
            if (field == 1 && wt == 0) id[i] = val;
            else if (field == 2 && wt == 2) {
                name_off[i] = payload - data;
                name_len[i] = (int64_t)val;
            } else if (field == 3 && wt == 0) type[i] = val;
            else if (field == 6 && wt == 0) start_us[i] = val;
            else if (field == 7 && wt == 0) dur_us[i] = val;
            else if ((field == 8 || field == 9) && wt == 2) {
                int w = field - 8;
                io_present[i * 2 + w] = 1;
                const uint8_t *q = payload, *qe = payload + val;
                while (q < qe) {
                    uint64_t t2, v2 = 0;
                    const uint8_t *pl2 = NULL;
                    rc = rd_varint(&q, qe, &t2);
                    if (!rc) rc = skip_field(&q, qe, (int)(t2 & 7), &v2, &pl2);
                    if (!rc && (t2 >> 3) == 0) rc = E_WIRETYPE;
                    if (rc) {
                        err[0] = i;
                        err[1] = q - data;
                        return rc;
                    }
                    int f2 = (int)(t2 >> 3);
                    if ((t2 & 7) == 2 && f2 >= 1 && f2 <= 3) {
                        io_off[i * 6 + w * 3 + f2 - 1] = pl2 - data;
                        io_len[i * 6 + w * 3 + f2 - 1] = (int64_t)v2;
                    }
                }
            }
        }
    }
    counts[0] = nc;
    counts[1] = nd;
    counts[2] = na;
    return 0;
}

/* AttributeProto messages: the name (offset, length, FNV-1a hash) and the last value field
 * (field number, wire type, varint/fixed value or payload length, payload offset). */
int64_t et_attrs(const uint8_t *data, const int64_t *off, const int64_t *len, int64_t a,
                 int64_t *name_off, int64_t *name_len, uint64_t *name_hash, int32_t *vfield,
                 int8_t *vwt, uint64_t *vval, int64_t *voff, int64_t *err) {
    for (int64_t i = 0; i < a; i++) {
        const uint8_t *p = data + off[i], *end = p + len[i];
        while (p < end) {
            uint64_t tag, val = 0;
            const uint8_t *payload = NULL;
            int rc = rd_varint(&p, end, &tag);
            if (!rc) rc = skip_field(&p, end, (int)(tag & 7), &val, &payload);
            if (!rc && (tag >> 3) == 0) rc = E_WIRETYPE;
            if (rc) {
                err[0] = i;
                err[1] = p - data;
                return rc;
            }
            int field = (int)(tag >> 3), wt = (int)(tag & 7);
            if (field == 1 && wt == 2) {
                uint64_t h = 1469598103934665603ULL;
                for (uint64_t k = 0; k < val; k++) {
                    h ^= payload[k];
                    h *= 1099511628211ULL;
                }
                name_off[i] = payload - data;
                name_len[i] = (int64_t)val;
                name_hash[i] = h;
            } else if (field >= 3 && field <= 32) {
                vfield[i] = field;
                vwt[i] = (int8_t)wt;
                vval[i] = val;
                voff[i] = payload ? payload - data : 0;
            }
        }
    }
    return 0;
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
 * rows are attribute indices (into node/kind/ival/soff/slen/code) sorted by node.
 * kind: 0 null, 1 int, 2 bool, 3 string (escaped), 4 pre-rendered text (pyoff), 5 JSON text (copied).
 * With out == NULL returns the number of bytes needed; else fills out and, per node, out_off/out_len.
 * Returns -10 when a node has the same key twice (the caller handles that case). */
static const char HEX[] = "0123456789abcdef";

static inline int64_t put(uint8_t *out, int64_t at, const void *src, int64_t n) {
    if (out) memcpy(out + at, src, (size_t)n);
    return at + n;
}

int64_t et_json(const uint8_t *data, const int64_t *rows, int64_t nr, const int64_t *node,
                const int8_t *kind, const int64_t *ival, const int64_t *soff, const int64_t *slen,
                const int64_t *code, const uint8_t *keybuf, const int64_t *keyoff,
                const uint8_t *pybuf, const int64_t *pyoff, uint8_t *out, int64_t *out_off,
                int64_t *out_len) {
    int64_t at = 0;
    int64_t r = 0;
    while (r < nr) {
        int64_t nd = node[rows[r]];
        int64_t first = r, begin = at;
        while (r < nr && node[rows[r]] == nd) r++;
        /* duplicate keys in this node? */
        for (int64_t x = first; x < r; x++)
            for (int64_t y = first; y < x; y++)
                if (code[rows[x]] == code[rows[y]]) return -10;
        at = put(out, at, "{", 1);
        for (int64_t x = first; x < r; x++) {
            int64_t i = rows[x];
            if (x > first) at = put(out, at, ",", 1);
            at = put(out, at, keybuf + keyoff[code[i]], keyoff[code[i] + 1] - keyoff[code[i]]);
            at = put(out, at, ":", 1);
            switch (kind[i]) {
            case 1: {
                char tmp[24];
                int len = 0;
                uint64_t u = ival[i] < 0 ? (uint64_t)0 - (uint64_t)ival[i] : (uint64_t)ival[i];
                do {
                    tmp[len++] = (char)('0' + u % 10);
                    u /= 10;
                } while (u);
                if (ival[i] < 0) tmp[len++] = '-';
                for (int k = len - 1; k >= 0; k--) at = put(out, at, &tmp[k], 1);
                break;
            }
            case 2:
                at = ival[i] ? put(out, at, "true", 4) : put(out, at, "false", 5);
                break;
            case 3: {
                const uint8_t *s = data + soff[i];
                at = put(out, at, "\"", 1);
                for (int64_t k = 0; k < slen[i]; k++) {
                    uint8_t c = s[k];
                    if (c == '"') at = put(out, at, "\\\"", 2);
                    else if (c == '\\') at = put(out, at, "\\\\", 2);
                    else if (c == '\n') at = put(out, at, "\\n", 2);
                    else if (c == '\r') at = put(out, at, "\\r", 2);
                    else if (c == '\t') at = put(out, at, "\\t", 2);
                    else if (c == '\b') at = put(out, at, "\\b", 2);
                    else if (c == '\f') at = put(out, at, "\\f", 2);
                    else if (c < 0x20) {
                        char u[6] = {'\\', 'u', '0', '0', HEX[c >> 4], HEX[c & 15]};
                        at = put(out, at, u, 6);
                    } else
                        at = put(out, at, &c, 1);
                }
                at = put(out, at, "\"", 1);
                break;
            }
            case 4:
                at = put(out, at, pybuf + pyoff[x], pyoff[x + 1] - pyoff[x]);
                break;
            case 5:
                at = put(out, at, data + soff[i], slen[i]);
                break;
            default:
                at = put(out, at, "null", 4);
            }
        }
        at = put(out, at, "}", 1);
        if (out) {
            out_off[nd] = begin;
            out_len[nd] = at - begin;
        }
    }
    return at;
}

/* In place: idx[k] = id[idx[k]] (node indices to node ids). */
void et_map_ids(const uint64_t *id, int64_t *idx, int64_t m) {
    for (int64_t k = 0; k < m; k++) idx[k] = (int64_t)id[idx[k]];
}
