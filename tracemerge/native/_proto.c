/* tracemerge's compiled .pftrace packet writer: the per-event loops of the Perfetto encoder.
 *
 * The Python encoder (tracemerge/formats/perfetto/encoder.py) stays the reference and makes
 * every decision: which events become slices, instants or counters, their tracks and
 * uuids, the lanes' records, the flows bound to them, the debug annotations (_core). This
 * module does the loops that ran once per event in Python:
 *
 *   nest(start, end)        the lane of each slice of one track (nesting.nest)
 *   slice_order(start, end) a lane's begin/end records in emission order (nesting.slice_order)
 *   chains(...)             the input's flow points bound to slices (flows.bind_input_flows)
 *   packets(...)            TrackEvent bodies framed as TracePackets (encoder._Bodies.packets)
 *
 * The inputs are numpy columns the encoder made (int64, through the buffer protocol) and
 * lists of bytes, not the rank's file; still every length and every index into a list is
 * checked, and nothing recurses.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

/* ---- int64 columns ------------------------------------------------------------------ */

typedef struct {
    Py_buffer view;
    const int64_t *v;
    Py_ssize_t n;
} Column;

/* A C-contiguous one-dimensional column of 8-byte integers (numpy int64/uint64). */
static int column_get(PyObject *obj, Column *c, const char *what) {
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = c->view.format ? c->view.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (c->view.itemsize != 8 || c->view.ndim != 1 || strlen(f) != 1 || strchr("qQlL", *f) == NULL) {
        PyBuffer_Release(&c->view);
        PyErr_Format(PyExc_TypeError, "%s: expected a 1-d int64 column", what);
        return -1;
    }
    c->v = (const int64_t *)c->view.buf;
    c->n = c->view.shape ? c->view.shape[0] : c->view.len / 8;
    return 0;
}

static PyObject *int64_bytes(const int64_t *v, Py_ssize_t n) {
    return PyBytes_FromStringAndSize((const char *)v, n * (Py_ssize_t)sizeof(int64_t));
}

/* The (start, end) columns of one track's or lane's slices, of equal length; on success
 * the caller releases both views. */
static int spans_get(PyObject *args, Column *start, Column *end) {
    PyObject *a, *b;
    if (!PyArg_ParseTuple(args, "OO", &a, &b)) return -1;
    if (column_get(a, start, "start") < 0) return -1;
    if (column_get(b, end, "end") < 0) { PyBuffer_Release(&start->view); return -1; }
    if (end->n != start->n) {
        PyBuffer_Release(&start->view);
        PyBuffer_Release(&end->view);
        PyErr_SetString(PyExc_ValueError, "start and end differ in length");
        return -1;
    }
    return 0;
}

/* ---- nest ---------------------------------------------------------------------------- */

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} Stack;

static int stack_push(Stack *s, int64_t x) {
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? 2 * s->cap : 8;
        int64_t *v = realloc(s->v, (size_t)cap * sizeof(int64_t));
        if (!v) return -1;
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}

/* A binary min-heap of (end, lane): the lanes' innermost open ends, possibly stale. */
typedef struct {
    int64_t end, lane;
} Top;

static int tops_push(Top **h, Py_ssize_t *n, Py_ssize_t *cap, int64_t end, int64_t lane) {
    if (*n == *cap) {
        Py_ssize_t c = *cap ? 2 * *cap : 16;
        Top *grown = realloc(*h, (size_t)c * sizeof(Top));
        if (!grown) return -1;
        *h = grown, *cap = c;
    }
    Py_ssize_t i = (*n)++;
    Top x = {end, lane};
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if ((*h)[up].end < x.end || ((*h)[up].end == x.end && (*h)[up].lane <= x.lane)) break;
        (*h)[i] = (*h)[up], i = up;
    }
    (*h)[i] = x;
    return 0;
}

static Top tops_pop(Top *h, Py_ssize_t *n) {
    Top first = h[0], x = h[--*n];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && (h[c + 1].end < h[c].end || (h[c + 1].end == h[c].end && h[c + 1].lane < h[c].lane))) c++;
        if (x.end < h[c].end || (x.end == h[c].end && x.lane <= h[c].lane)) break;
        h[i] = h[c], i = c;
    }
    if (*n) h[i] = x;
    return first;
}

#define LANE_EMPTY INT64_MAX   /* a lane with nothing open takes any slice */
#define NO_LANE INT64_MIN      /* a leaf past the last lane takes none */

static void tree_set(int64_t *tree, Py_ssize_t size, Py_ssize_t k, int64_t v) {
    Py_ssize_t i = size + k;
    tree[i] = v;
    for (i /= 2; i; i /= 2) tree[i] = tree[2 * i] > tree[2 * i + 1] ? tree[2 * i] : tree[2 * i + 1];
}

/* nest(start, end) -> int64 bytes: the lane of each slice of one track, slices sorted by
 * (start, -end). A slice goes to the first lane whose innermost open slice (after closing
 * those ended by its start) it nests in, else to a new lane: slices.nest, the reference,
 * and its n log n method (a max-tree over the lanes' innermost open ends, a heap of them
 * for the lanes a start closes; a scan of every lane per slice was quadratic). */
static PyObject *proto_nest(PyObject *self, PyObject *args) {
    Column start, end;
    if (spans_get(args, &start, &end) < 0) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = start.n, n_lanes = 0, cap_lanes = 0, size = 1, n_tops = 0, cap_tops = 0;
    Stack *lanes = NULL;
    Top *tops = NULL;
    int64_t *out = NULL, *tree = NULL;
    out = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    tree = malloc(2 * sizeof(int64_t));
    if (!out || !tree) { PyErr_NoMemory(); goto done; }
    tree[0] = tree[1] = NO_LANE;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = start.v[i], e = end.v[i];
        while (n_tops && tops[0].end <= s) {
            Py_ssize_t k = (Py_ssize_t)tops_pop(tops, &n_tops).lane;
            Stack *st = &lanes[k];
            while (st->n && st->v[st->n - 1] <= s) st->n--;
            tree_set(tree, size, k, st->n ? st->v[st->n - 1] : LANE_EMPTY);
            if (st->n && tops_push(&tops, &n_tops, &cap_tops, st->v[st->n - 1], k) < 0) { PyErr_NoMemory(); goto done; }
        }
        Py_ssize_t k = -1;
        if (tree[1] >= e) {
            Py_ssize_t at = 1;
            while (at < size) at = tree[2 * at] >= e ? 2 * at : 2 * at + 1;
            k = at - size;
        }
        if (k < 0) {
            if (n_lanes == cap_lanes) {
                Py_ssize_t cap = cap_lanes ? 2 * cap_lanes : 4;
                Stack *grown = realloc(lanes, (size_t)cap * sizeof(Stack));
                if (!grown) { PyErr_NoMemory(); goto done; }
                memset(grown + cap_lanes, 0, (size_t)(cap - cap_lanes) * sizeof(Stack));
                lanes = grown, cap_lanes = cap;
            }
            if (n_lanes == size) {  /* the tree over twice as many lanes (the new ones: none) */
                int64_t *grown = malloc((size_t)(4 * size) * sizeof(int64_t));
                if (!grown) { PyErr_NoMemory(); goto done; }
                memcpy(grown + 2 * size, tree + size, (size_t)size * sizeof(int64_t));
                for (Py_ssize_t j = 3 * size; j < 4 * size; j++) grown[j] = NO_LANE;
                for (Py_ssize_t j = 2 * size - 1; j > 0; j--)
                    grown[j] = grown[2 * j] > grown[2 * j + 1] ? grown[2 * j] : grown[2 * j + 1];
                grown[0] = NO_LANE;
                free(tree);
                tree = grown, size *= 2;
            }
            k = n_lanes++;
        }
        if (stack_push(&lanes[k], e) < 0) { PyErr_NoMemory(); goto done; }
        tree_set(tree, size, k, e);
        if (tops_push(&tops, &n_tops, &cap_tops, e, k) < 0) { PyErr_NoMemory(); goto done; }
        out[i] = k;
    }
    result = int64_bytes(out, n);
done:
    for (Py_ssize_t k = 0; k < n_lanes; k++) free(lanes[k].v);
    free(lanes);
    free(tops);
    free(tree);
    free(out);
    PyBuffer_Release(&start.view);
    PyBuffer_Release(&end.view);
    return result;
}

/* ---- slice_order -------------------------------------------------------------------- */

enum { SLICE_BEGIN = 1, SLICE_END = 2 };

/* slice_order(start, end) -> (ts, kind, slice) as int64 bytes: one lane's begin and end
 * records, properly nested (an end is emitted before the first begin at or after it). */
static PyObject *proto_slice_order(PyObject *self, PyObject *args) {
    Column start, end;
    if (spans_get(args, &start, &end) < 0) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = start.n, m = 0, depth = 0;
    int64_t *ts = NULL, *kind = NULL, *which = NULL, *stack = NULL;
    size_t records = (size_t)(2 * n + 1) * sizeof(int64_t);
    ts = malloc(records), kind = malloc(records), which = malloc(records);
    stack = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!ts || !kind || !which || !stack) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < n; i++) {
        while (depth && end.v[stack[depth - 1]] <= start.v[i]) {
            int64_t j = stack[--depth];
            ts[m] = end.v[j], kind[m] = SLICE_END, which[m++] = j;
        }
        stack[depth++] = i;
        ts[m] = start.v[i], kind[m] = SLICE_BEGIN, which[m++] = i;
    }
    while (depth) {
        int64_t j = stack[--depth];
        ts[m] = end.v[j], kind[m] = SLICE_END, which[m++] = j;
    }
    result = Py_BuildValue("(NNN)", int64_bytes(ts, m), int64_bytes(kind, m), int64_bytes(which, m));
done:
    free(ts), free(kind), free(which), free(stack);
    PyBuffer_Release(&start.view);
    PyBuffer_Release(&end.view);
    return result;
}

/* ---- packets ------------------------------------------------------------------------ */

static inline Py_ssize_t varint_len(uint64_t v) {
    Py_ssize_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

static inline char *varint_put(char *p, uint64_t v) {
    while (v >= 0x80) { *p++ = (char)((v & 0x7F) | 0x80); v >>= 7; }
    *p++ = (char)v;
    return p;
}

/* The bytes of list[slot], or an empty span for slot -1; an error for anything else. */
static int slot_bytes(PyObject *list, int64_t slot, const char **data, Py_ssize_t *len, const char *what) {
    if (slot == -1) { *data = "", *len = 0; return 0; }
    if (slot < 0 || slot >= PyList_GET_SIZE(list)) {
        PyErr_Format(PyExc_IndexError, "%s slot %lld out of range", what, (long long)slot);
        return -1;
    }
    PyObject *item = PyList_GET_ITEM(list, slot);
    if (!PyBytes_Check(item)) { PyErr_Format(PyExc_TypeError, "%s items must be bytes", what); return -1; }
    *data = PyBytes_AS_STRING(item), *len = PyBytes_GET_SIZE(item);
    return 0;
}

#define N_COLUMNS 11
#define N_RECORD_COLUMNS 9   /* the columns of one row per packet; then the flows' two */

/* packets(ts, kind, uuid, name, cat, args_slot, tail_slot, flow_lo, flow_hi, flow_id,
 *         flow_slot, args, tails, flags) -> bytes
 *
 * Every body k as a TracePacket, in the columns' order (the caller sorts them):
 *   0x0a len | timestamp 0x40 ts[k] | flags | track_event 0x5a len | body
 * body: type 0x48 kind[k] | track_uuid 0x58 uuid[k] | name_iid 0x50 name[k]+1 (name >= 0)
 *       | category_iids 0x18 cat[k]+1 (cat >= 0) | args[args_slot[k]] | tails[tail_slot[k]]
 *       | for j in flow_lo[k]..flow_hi[k]: flow_ids (47) or, where flow_slot[j] is odd,
 *         terminating_flow_ids (48), fixed64 flow_id[j]
 * which is the field order of encoder._Bodies (head, debug annotations, a counter's value,
 * flows; the caller orders each packet's flows, outgoing before terminating). ts and kind
 * are written as unsigned varints (the caller checks they are not negative, as the Python
 * path's varints refuse them), uuid and flow ids as uint64. */
static PyObject *proto_packets(PyObject *self, PyObject *args) {
    PyObject *cols[N_COLUMNS], *arg_list, *tail_list;
    const char *flags;
    Py_ssize_t flags_len;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOO!O!y#", &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5],
                          &cols[6], &cols[7], &cols[8], &cols[9], &cols[10], &PyList_Type, &arg_list,
                          &PyList_Type, &tail_list, &flags, &flags_len))
        return NULL;
    static const char *const names[N_COLUMNS] = {"ts", "kind", "uuid", "name", "cat", "args_slot", "tail_slot",
                                                 "flow_lo", "flow_hi", "flow_id", "flow_slot"};
    Column c[N_COLUMNS];
    int got = 0;
    PyObject *result = NULL;
    for (; got < N_COLUMNS; got++)
        if (column_get(cols[got], &c[got], names[got]) < 0) goto done;
    Py_ssize_t n = c[0].n, n_flows = c[9].n;
    for (int k = 1; k < N_RECORD_COLUMNS; k++)
        if (c[k].n != n) { PyErr_Format(PyExc_ValueError, "%s differs in length from ts", names[k]); goto done; }
    if (c[10].n != n_flows) { PyErr_SetString(PyExc_ValueError, "flow_slot differs in length from flow_id"); goto done; }
    const int64_t *ts = c[0].v, *kind = c[1].v, *uuid = c[2].v, *name = c[3].v, *cat = c[4].v;
    const int64_t *aslot = c[5].v, *tslot = c[6].v, *flo = c[7].v, *fhi = c[8].v, *fid = c[9].v, *fslot = c[10].v;

    /* sizes first (and every check), so the output is one allocation written once */
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (ts[k] < 0 || kind[k] < 0 || name[k] < -1 || cat[k] < -1
            || name[k] == INT64_MAX || cat[k] == INT64_MAX
            || flo[k] < 0 || flo[k] > fhi[k] || fhi[k] > n_flows) {
            PyErr_Format(PyExc_ValueError, "packet %zd: a negative or out-of-range field", k);
            goto done;
        }
        const char *d;
        Py_ssize_t alen, tlen;
        if (slot_bytes(arg_list, aslot[k], &d, &alen, "args") < 0) goto done;
        if (slot_bytes(tail_list, tslot[k], &d, &tlen, "tails") < 0) goto done;
        Py_ssize_t body = 1 + varint_len((uint64_t)kind[k]) + 1 + varint_len((uint64_t)uuid[k])
                          + (name[k] >= 0 ? 1 + varint_len((uint64_t)name[k] + 1) : 0)
                          + (cat[k] >= 0 ? 1 + varint_len((uint64_t)cat[k] + 1) : 0) + alen + tlen
                          + 10 * (fhi[k] - flo[k]);
        Py_ssize_t packet = 1 + varint_len((uint64_t)ts[k]) + flags_len + 1 + varint_len((uint64_t)body) + body;
        Py_ssize_t whole = 1 + varint_len((uint64_t)packet) + packet;
        if (whole > PY_SSIZE_T_MAX - total) { PyErr_NoMemory(); goto done; }
        total += whole;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (!result) goto done;
    char *p = PyBytes_AS_STRING(result);
    for (Py_ssize_t k = 0; k < n; k++) {
        const char *a, *t;
        Py_ssize_t alen, tlen;
        slot_bytes(arg_list, aslot[k], &a, &alen, "args");  /* checked above; lists are not */
        slot_bytes(tail_list, tslot[k], &t, &tlen, "tails"); /* changed in between (GIL held) */
        Py_ssize_t body = 1 + varint_len((uint64_t)kind[k]) + 1 + varint_len((uint64_t)uuid[k])
                          + (name[k] >= 0 ? 1 + varint_len((uint64_t)name[k] + 1) : 0)
                          + (cat[k] >= 0 ? 1 + varint_len((uint64_t)cat[k] + 1) : 0) + alen + tlen
                          + 10 * (fhi[k] - flo[k]);
        Py_ssize_t packet = 1 + varint_len((uint64_t)ts[k]) + flags_len + 1 + varint_len((uint64_t)body) + body;
        *p++ = 0x0a;
        p = varint_put(p, (uint64_t)packet);
        *p++ = 0x40;
        p = varint_put(p, (uint64_t)ts[k]);
        memcpy(p, flags, (size_t)flags_len), p += flags_len;
        *p++ = 0x5a;
        p = varint_put(p, (uint64_t)body);
        *p++ = 0x48;
        p = varint_put(p, (uint64_t)kind[k]);
        *p++ = 0x58;
        p = varint_put(p, (uint64_t)uuid[k]);
        if (name[k] >= 0) { *p++ = 0x50; p = varint_put(p, (uint64_t)name[k] + 1); }
        if (cat[k] >= 0) { *p++ = 0x18; p = varint_put(p, (uint64_t)cat[k] + 1); }
        memcpy(p, a, (size_t)alen), p += alen;
        memcpy(p, t, (size_t)tlen), p += tlen;
        for (int64_t j = flo[k]; j < fhi[k]; j++) {
            /* tag 47 or 48, wire type 1 (fixed64), as varints; then the id little-endian */
            *p++ = (fslot[j] & 1) ? (char)0x81 : (char)0xF9;
            *p++ = (fslot[j] & 1) ? 0x03 : 0x02;
            uint64_t v = (uint64_t)fid[j];
            for (int b = 0; b < 8; b++) *p++ = (char)(v >> (8 * b));
        }
    }
    if (p != PyBytes_AS_STRING(result) + total) {  /* sizes and writes disagree: a bug, not input */
        Py_CLEAR(result);
        PyErr_SetString(PyExc_SystemError, "packets: size mismatch");
    }
done:
    for (int k = 0; k < got; k++) PyBuffer_Release(&c[k].view);
    return result;
}

/* ---- flow chains -------------------------------------------------------------------- */

enum { ROLE_OUT = 0, ROLE_STEP = 1, ROLE_IN = 2 };
enum { DROP_NONE, DROP_IN_FLIGHT, DROP_STEP_NO_START, DROP_END_NO_START, DROP_ENDS_BEFORE };

/* chains(fid, role, v1, begin_ns, end_ns, has_end) -> (slot, drop) as int64 bytes
 *
 * The points of the input's flows, each chain's points together in time order (the
 * caller sorts them), walked as Perfetto reads them (flows.bind_input_flows, the
 * reference): a start binds to its slice's begin unless the id is in flight; a later
 * point to its slice's begin when that begins after the previous point, else to its end
 * when that ends after it, else nowhere. slot: -1 (not bound), else 2 * at_end +
 * terminating (the SliceFlows field); drop: why a v1 point was not bound (DROP_*). */
static PyObject *proto_chains(PyObject *self, PyObject *args) {
    PyObject *cols[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5])) return NULL;
    static const char *const names[6] = {"fid", "role", "v1", "begin_ns", "end_ns", "has_end"};
    Column c[6];
    int got = 0;
    PyObject *result = NULL;
    int64_t *slot = NULL, *drop = NULL;
    for (; got < 6; got++)
        if (column_get(cols[got], &c[got], names[got]) < 0) goto done;
    Py_ssize_t n = c[0].n;
    for (int k = 1; k < 6; k++)
        if (c[k].n != n) { PyErr_Format(PyExc_ValueError, "%s differs in length from fid", names[k]); goto done; }
    const int64_t *fid = c[0].v, *role = c[1].v, *v1 = c[2].v, *begin = c[3].v, *end = c[4].v, *has_end = c[5].v;
    slot = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    drop = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!slot || !drop) { PyErr_NoMemory(); goto done; }
    int in_flight = 0;
    int64_t last = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (k == 0 || fid[k] != fid[k - 1]) in_flight = 0;   /* a new chain */
        int64_t at;
        int at_end = 0, why = DROP_NONE;
        slot[k] = -1;
        if (role[k] == ROLE_OUT) {
            if (in_flight) why = DROP_IN_FLIGHT;
            else at = begin[k];
        } else if (!in_flight) {
            why = role[k] == ROLE_STEP ? DROP_STEP_NO_START : DROP_END_NO_START;
        } else if (begin[k] > last) {
            at = begin[k];
        } else if (has_end[k] && end[k] > last) {
            at = end[k], at_end = 1;
        } else {
            why = DROP_ENDS_BEFORE;
        }
        drop[k] = v1[k] ? why : DROP_NONE;   /* a v2 point rides on an event that is kept */
        if (why != DROP_NONE) continue;
        slot[k] = 2 * at_end + (role[k] == ROLE_IN);
        in_flight = role[k] != ROLE_IN;
        last = at;
    }
    result = Py_BuildValue("(NN)", int64_bytes(slot, n), int64_bytes(drop, n));
done:
    free(slot), free(drop);
    for (int k = 0; k < got; k++) PyBuffer_Release(&c[k].view);
    return result;
}

static PyMethodDef proto_methods[] = {
    {"chains", proto_chains, METH_VARARGS,
     "chains(fid, role, v1, begin_ns, end_ns, has_end) -> (slot, drop) int64 bytes of flow points"},
    {"nest", proto_nest, METH_VARARGS, "nest(start, end) -> int64 bytes: each slice's lane"},
    {"slice_order", proto_slice_order, METH_VARARGS,
     "slice_order(start, end) -> (ts, kind, slice) int64 bytes of one lane's records"},
    {"packets", proto_packets, METH_VARARGS,
     "packets(ts, kind, uuid, name, cat, args_slot, tail_slot, flow_lo, flow_hi, flow_id, flow_slot, args, tails,"
     " flags) -> framed TracePackets"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef proto_module = {PyModuleDef_HEAD_INIT, "_proto", NULL, -1, proto_methods};

PyMODINIT_FUNC PyInit__proto(void) { return PyModule_Create(&proto_module); }
