/* Longest paths and critical-path walks over a DAG of time points (charllm_trace.graph).
 *
 * Built as an extension module when the package is installed (setup.py); nothing is
 * compiled at run time. Arrays travel through the buffer protocol (numpy arrays,
 * int64, C-contiguous); no numpy headers are needed to build it.
 *
 * longest_path(src, dst, lag, prio, root, time_out, bind_out) -> processed
 *     src, dst, bind_out int32 (vertex and edge indexes), lag, root, time_out int64, prio int8.
 *     Vertices 0..n-1 (n = len(root)); edge e goes src[e] -> dst[e] and says
 *     time[dst] >= time[src] + lag[e]. root[v] is a lower bound of time[v]
 *     (INT64_MIN: none). Kahn's topological order; time[v] is the largest bound,
 *     bind[v] the edge that gives it (-1: the root bound, or no bound at all). On equal
 *     bounds an edge wins over the root bound, the edge of higher prio over the others,
 *     then the edge of larger index (not the one met later: the choice does not depend on the
 *     order vertices are visited in, so one rank's graph alone binds as the merged run's graph
 *     does, engine/graph_step.py). Returns the number of
 *     vertices reached in topological order: less than n means a cycle; the vertices
 *     left have time INT64_MIN.
 *
 * topo_order(src, dst, key, out) -> placed
 *     Kahn's algorithm taking, among the vertices whose predecessors are all placed, the one of
 *     smallest key (ties: smaller index): a topological order that stays as close to the key's
 *     order as the edges allow. src, dst, out int32; key int64 (n = len(key)). Returns the
 *     number of vertices placed in out (less than n: a cycle).
 *
 * walk_back(src, bind, time, start, stop_time, out) -> length   (src, bind, out int32)
 *     From vertex `start`, follow bind[] back (edge -> its src) while the vertex's
 *     time is >= stop_time; writes the vertices visited (start first) into out and
 *     returns how many. Stops at a vertex with no binding edge.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    int held;
} Buf;

static int get_buf(PyObject *obj, Buf *b, int writable, const char *what, Py_ssize_t itemsize) {
    b->held = 0;
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) != 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a contiguous%s array", what, writable ? " writable" : "");
        return -1;
    }
    b->held = 1;
    if (b->view.itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected %zd-byte items, got %zd", what, itemsize, b->view.itemsize);
        return -1;
    }
    return 0;
}

static void release(Buf *bs, int n) {
    for (int i = 0; i < n; i++)
        if (bs[i].held) PyBuffer_Release(&bs[i].view);
}

/* The buffers of the n arguments o (names and item sizes given; those from `writable` on are
 * written): 0, or -1 with an exception set and every buffer released. */
static int get_bufs(PyObject **o, Buf *b, int n, const char **names, const Py_ssize_t *sizes, int writable) {
    memset(b, 0, (size_t)n * sizeof(Buf));
    for (int i = 0; i < n; i++) {
        if (get_buf(o[i], &b[i], i >= writable, names[i], sizes[i]) != 0) {
            release(b, n);
            return -1;
        }
    }
    return 0;
}

/* Release the n buffers and raise ValueError(msg). */
static PyObject *fail(Buf *b, int n, const char *msg) {
    release(b, n);
    PyErr_SetString(PyExc_ValueError, msg);
    return NULL;
}

static Py_ssize_t count(Buf *b) { return b->view.len / b->view.itemsize; }

/* The m edges src -> dst of n nodes as compressed rows: ptr[v] .. ptr[v + 1] (ptr zeroed, n + 1
 * long) will hold the edges leaving v (prefix sums of the out-degrees); indeg[v] (zeroed) counts
 * the edges entering v. */
static void degrees(const int32_t *src, const int32_t *dst, Py_ssize_t m, Py_ssize_t n, int64_t *ptr,
                    int32_t *indeg) {
    for (Py_ssize_t e = 0; e < m; e++) {
        ptr[src[e] + 1]++;
        indeg[dst[e]]++;
    }
    for (Py_ssize_t v = 0; v < n; v++) ptr[v + 1] += ptr[v];
}

static PyObject *longest_path(PyObject *self, PyObject *args) {
    PyObject *o[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6])) return NULL;
    Buf b[7];
    const char *names[7] = {"src", "dst", "lag", "prio", "root", "time_out", "bind_out"};
    const Py_ssize_t sizes[7] = {4, 4, 8, 1, 8, 8, 4};
    if (get_bufs(o, b, 7, names, sizes, 5) != 0) return NULL;
    Py_ssize_t m = count(&b[0]);
    Py_ssize_t n = count(&b[4]);
    if (count(&b[1]) != m || count(&b[2]) != m || count(&b[3]) != m || count(&b[5]) != n || count(&b[6]) != n)
        return fail(b, 7, "longest_path: array lengths differ");
    const int32_t *src = b[0].view.buf, *dst = b[1].view.buf;
    const int64_t *lag = b[2].view.buf, *root = b[4].view.buf;
    const int8_t *prio = b[3].view.buf;
    int64_t *time = b[5].view.buf;
    int32_t *bind = b[6].view.buf;
    if (n >= INT32_MAX || m >= INT32_MAX)
        return fail(b, 7, "longest_path: more than 2**31 - 1 vertices or edges");
    for (Py_ssize_t e = 0; e < m; e++) {
        if (src[e] < 0 || src[e] >= n || dst[e] < 0 || dst[e] >= n) {
            release(b, 7);
            PyErr_Format(PyExc_ValueError, "longest_path: edge %zd refers to a vertex out of range", e);
            return NULL;
        }
    }
    int64_t *ptr = calloc((size_t)n + 1, sizeof(int64_t));
    int32_t *out = malloc(((size_t)m + 1) * sizeof(int32_t));
    int32_t *indeg = calloc((size_t)n + 1, sizeof(int32_t));
    int32_t *queue = malloc(((size_t)n + 1) * sizeof(int32_t));
    if (!ptr || !out || !indeg || !queue) {
        free(ptr); free(out); free(indeg); free(queue);
        release(b, 7);
        return PyErr_NoMemory();
    }
    Py_ssize_t done = 0;
    Py_BEGIN_ALLOW_THREADS
    degrees(src, dst, m, n, ptr, indeg);
    {
        int64_t *fill = malloc(((size_t)n + 1) * sizeof(int64_t));
        if (fill) {
            memcpy(fill, ptr, (size_t)n * sizeof(int64_t));
            for (Py_ssize_t e = 0; e < m; e++) out[fill[src[e]]++] = (int32_t)e;
            free(fill);
        } else {
            m = -1; /* signals out of memory below */
        }
    }
    if (m >= 0) {
        Py_ssize_t head = 0, tail = 0;
        for (Py_ssize_t v = 0; v < n; v++) {
            time[v] = root[v];
            bind[v] = -1;
            if (indeg[v] == 0) queue[tail++] = (int32_t)v;
        }
        while (head < tail) {
            int32_t u = queue[head++];
            int64_t tu = time[u];
            for (int64_t k = ptr[u]; k < ptr[u + 1]; k++) {
                int32_t e = out[k];
                int32_t v = dst[e];
                if (tu != INT64_MIN) {
                    int64_t cand = tu + lag[e];
                    int64_t cur = time[v];
                    /* on a tie an edge beats the root bound (the path goes on through it) */
                    if (cur == INT64_MIN || cand > cur ||
                        (cand == cur && (bind[v] < 0 || prio[e] > prio[bind[v]] ||
                                         (prio[e] == prio[bind[v]] && e > bind[v])))) {
                        time[v] = cand;
                        bind[v] = e;
                    }
                }
                if (--indeg[v] == 0) queue[tail++] = v;
            }
        }
        done = tail;
        if (done < n) {
            for (Py_ssize_t v = 0; v < n; v++)
                if (indeg[v] > 0) time[v] = INT64_MIN;
        }
    }
    Py_END_ALLOW_THREADS
    free(ptr); free(out); free(indeg); free(queue);
    release(b, 7);
    if (m < 0) return PyErr_NoMemory();
    return PyLong_FromSsize_t(done);
}

static PyObject *walk_back(PyObject *self, PyObject *args) {
    PyObject *o[4];
    long long start, stop_time;
    if (!PyArg_ParseTuple(args, "OOOLLO", &o[0], &o[1], &o[2], &start, &stop_time, &o[3])) return NULL;
    Buf b[4];
    const char *names[4] = {"src", "bind", "time", "out"};
    const Py_ssize_t sizes[4] = {4, 4, 8, 4};
    if (get_bufs(o, b, 4, names, sizes, 3) != 0) return NULL;
    Py_ssize_t m = count(&b[0]), n = count(&b[1]), cap = count(&b[3]);
    if (count(&b[2]) != n || start < 0 || start >= n)
        return fail(b, 4, "walk_back: bad lengths or start vertex");
    const int32_t *src = b[0].view.buf, *bind = b[1].view.buf;
    const int64_t *time = b[2].view.buf;
    int32_t *out = b[3].view.buf;
    Py_ssize_t len = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    int32_t v = (int32_t)start;
    while (len < cap) {
        out[len++] = v;
        int32_t e = bind[v];
        if (e < 0) break;
        if (e >= m) { bad = 1; break; }
        int32_t u = src[e];
        if (u < 0 || u >= n || time[u] < stop_time) break;
        v = u;
    }
    Py_END_ALLOW_THREADS
    release(b, 4);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "walk_back: binding edge out of range");
        return NULL;
    }
    return PyLong_FromSsize_t(len);
}

static int heap_less(const int64_t *key, int32_t a, int32_t b) {
    return key[a] < key[b] || (key[a] == key[b] && a < b);
}

static PyObject *topo_order(PyObject *self, PyObject *args) {
    PyObject *o[4];
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    Buf b[4];
    const char *names[4] = {"src", "dst", "key", "out"};
    const Py_ssize_t sizes[4] = {4, 4, 8, 4};
    if (get_bufs(o, b, 4, names, sizes, 3) != 0) return NULL;
    Py_ssize_t m = count(&b[0]), n = count(&b[2]);
    if (count(&b[1]) != m || count(&b[3]) != n || n >= INT32_MAX || m >= INT32_MAX)
        return fail(b, 4, "topo_order: bad lengths");
    const int32_t *src = b[0].view.buf, *dst = b[1].view.buf;
    const int64_t *key = b[2].view.buf;
    int32_t *out = b[3].view.buf;
    for (Py_ssize_t e = 0; e < m; e++) {
        if (src[e] < 0 || src[e] >= n || dst[e] < 0 || dst[e] >= n)
            return fail(b, 4, "topo_order: an edge refers to a vertex out of range");
    }
    int64_t *ptr = calloc((size_t)n + 1, sizeof(int64_t));
    int32_t *adj = malloc(((size_t)m + 1) * sizeof(int32_t));
    int32_t *indeg = calloc((size_t)n + 1, sizeof(int32_t));
    int32_t *heap = malloc(((size_t)n + 1) * sizeof(int32_t));
    int64_t *fill = malloc(((size_t)n + 1) * sizeof(int64_t));
    if (!ptr || !adj || !indeg || !heap || !fill) {
        free(ptr); free(adj); free(indeg); free(heap); free(fill);
        release(b, 4);
        return PyErr_NoMemory();
    }
    Py_ssize_t placed = 0;
    Py_BEGIN_ALLOW_THREADS
    degrees(src, dst, m, n, ptr, indeg);
    memcpy(fill, ptr, (size_t)n * sizeof(int64_t));
    for (Py_ssize_t e = 0; e < m; e++) adj[fill[src[e]]++] = dst[e];
    Py_ssize_t hn = 0;
    for (Py_ssize_t v = 0; v < n; v++) {
        if (indeg[v] == 0) {  /* push */
            Py_ssize_t i = hn++;
            heap[i] = (int32_t)v;
            while (i > 0 && heap_less(key, heap[i], heap[(i - 1) / 2])) {
                int32_t t = heap[i]; heap[i] = heap[(i - 1) / 2]; heap[(i - 1) / 2] = t;
                i = (i - 1) / 2;
            }
        }
    }
    while (hn > 0) {
        int32_t u = heap[0];
        heap[0] = heap[--hn];
        Py_ssize_t i = 0;
        for (;;) {  /* sift down */
            Py_ssize_t l = 2 * i + 1, r = l + 1, s_ = i;
            if (l < hn && heap_less(key, heap[l], heap[s_])) s_ = l;
            if (r < hn && heap_less(key, heap[r], heap[s_])) s_ = r;
            if (s_ == i) break;
            int32_t t = heap[i]; heap[i] = heap[s_]; heap[s_] = t;
            i = s_;
        }
        out[placed++] = u;
        for (int64_t k = ptr[u]; k < ptr[u + 1]; k++) {
            int32_t v = adj[k];
            if (--indeg[v] == 0) {
                Py_ssize_t j = hn++;
                heap[j] = v;
                while (j > 0 && heap_less(key, heap[j], heap[(j - 1) / 2])) {
                    int32_t t = heap[j]; heap[j] = heap[(j - 1) / 2]; heap[(j - 1) / 2] = t;
                    j = (j - 1) / 2;
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    free(ptr); free(adj); free(indeg); free(heap); free(fill);
    release(b, 4);
    return PyLong_FromSsize_t(placed);
}

static PyMethodDef methods[] = {
    {"topo_order", topo_order, METH_VARARGS, "Topological order closest to a key (see the module source)."},
    {"longest_path", longest_path, METH_VARARGS, "Longest paths over a DAG (see the module source)."},
    {"walk_back", walk_back, METH_VARARGS, "Follow binding edges back from a vertex."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dag", "DAG kernels of charllm_trace.graph", -1, methods};

PyMODINIT_FUNC PyInit__dag(void) { return PyModule_Create(&module); }
