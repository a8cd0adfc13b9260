/* tracemerge's compiled core: one pass over a Kineto/Chrome trace document's bytes.
 *
 * scan(data) reads the document (an object with a "traceEvents" array) into per-event
 * spans and values: the columns the rest of tracemerge needs (ph, name/cat and pid/tid
 * codes with their tables in first-seen order, ts/dur as the doubles the text denotes,
 * flow ids, the args' spans and the spans of their integer id values). Scan.write()
 * emits events as the Python path's JSON writer does (msgspec encoding the reader's
 * structs: keys in the struct's order, compact) with pid, ts, dur and the ids rewritten
 * and the args copied byte for byte.
 *
 * The core takes a strict subset of valid documents and gives up (returns a reason
 * string) on anything else: a key it does not know, a repeated key, an escaped key or
 * name, a float where the output would re-encode it, ids that are not plain integers,
 * args the Python path would decode and re-encode. The caller then reads that rank with
 * the Python path, so the output never depends on which core read it.
 *
 * Untrusted input: every read is bounds-checked against the buffer's end, nesting is
 * walked with an explicit stack of bounded depth (no recursion), integers are limited to
 * 18 digits (they fit int64 with room), offsets to 32 bits (larger files are declined).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>   /* x86-64 baseline: 16 bytes a step where the scan walks text */
#endif
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))  /* the scan's hot steps, called from several places */
#else
#define ALWAYS_INLINE inline
#endif

/* ---- keys --------------------------------------------------------------------------- */

enum {
    K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ARGS,
    /* the extra keys, in the output's order (read._Event's fields) */
    K_ID, K_ID2, K_BP, K_S, K_BIND_ID, K_FLOW_IN, K_FLOW_OUT, K_TTS, K_TDUR, K_CNAME,
    K_SCOPE, K_SF, K_STACK, K_ESF, K_ESTACK, K_COUNT
};
#define K_FIRST_EXTRA K_ID
static const char *const KEY_NAMES[K_COUNT] = {
    "ph", "cat", "name", "pid", "tid", "ts", "dur", "args",
    "id", "id2", "bp", "s", "bind_id", "flow_in", "flow_out", "tts", "tdur", "cname",
    "scope", "sf", "stack", "esf", "estack"};

static const uint8_t KEY_LEN[K_COUNT] = {2, 3, 4, 3, 3, 2, 3, 4, 2, 3, 2, 1, 7, 7, 8, 3, 4, 5, 5, 2, 5, 3, 6};

/* each key's text as a word (keys are at most 8 bytes), and a table of the keys by a
 * multiplicative hash of it (the multiplier found offline: no two keys share a slot on a
 * little-endian machine; elsewhere key_words_init finds a collision and the keys are
 * searched one by one); made once at import */
static uint64_t KEY_WORD[K_COUNT];
#define KEY_HASH_MUL 0x9be3cecb8c497c69ULL
static int8_t KEY_SLOT[64];
static int KEY_HASHED;

static inline unsigned key_slot(uint64_t v) { return (unsigned)((v * KEY_HASH_MUL) >> 58); }

static uint64_t word_of(const char *s, size_t n) {
    uint64_t v = 0;
    memcpy(&v, s, n);
    return v;
}

static void key_words_init(void) {
    memset(KEY_SLOT, -1, sizeof KEY_SLOT);
    KEY_HASHED = 1;
    for (int k = 0; k < K_COUNT; k++) {
        KEY_WORD[k] = word_of(KEY_NAMES[k], KEY_LEN[k]);
        unsigned h = key_slot(KEY_WORD[k]);
        if (KEY_SLOT[h] >= 0) KEY_HASHED = 0;
        KEY_SLOT[h] = (int8_t)k;
    }
}

static ALWAYS_INLINE int key_word_id(uint64_t v, size_t n) {
    if (KEY_HASHED) {
        int k = KEY_SLOT[key_slot(v)];
        return k >= 0 && KEY_WORD[k] == v && KEY_LEN[k] == n ? k : -1;
    }
    /* the common keys first, in Kineto's order, then the rest */
    for (int k = 0; k < K_COUNT; k++) {
        if (KEY_LEN[k] == n && KEY_WORD[k] == v) return k;
    }
    return -1;
}

/* the key of n bytes at s, whose buffer holds at least avail bytes from s */
static inline int key_id_at(const char *s, size_t n, size_t avail) {
    if (n < 1 || n > 8) return -1;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (avail < 8) return key_word_id(word_of(s, n), n);
#else
    if (1) return key_word_id(word_of(s, n), n);  /* the mask below keeps the first bytes on little-endian only */
#endif
    uint64_t v;
    memcpy(&v, s, 8);  /* one load, the bytes past the key masked off */
    return key_word_id(n == 8 ? v : v & ((1ULL << (8 * n)) - 1), n);
}

static int key_id(const char *s, size_t n) { return key_id_at(s, n, n); }

/* the args keys whose integer values are namespaced (transform.ARG_ID_KEYS) */
static const char *const ARG_ID_KEYS[4] = {"External id", "correlation", "Correlation ID", "External ID"};
static const size_t ARG_ID_LEN[4] = {11, 11, 14, 11};

/* ---- per-event record --------------------------------------------------------------- */

enum {
    F_TS = 1, F_DUR = 2, F_TID_NULL = 4, F_TID_ABSENT = 8, F_ID = 16, F_BIND_ID = 32,
    F_NAME = 64, F_CAT = 128, F_ARGS = 256, F_PID_ABSENT = 512, F_NAME_NULL = 1024,
    F_CAT_NULL = 2048
};

typedef struct {
    uint32_t name_off, name_len;   /* spans include the quotes */
    uint32_t cat_off, cat_len;
    uint32_t pid_off, pid_len;
    uint32_t tid_off, tid_len;
    uint32_t args_off, args_len;
    uint32_t extra_first, argid_first;
    uint16_t extra_count, argid_count;
    uint32_t flags;
    double ts, dur;
    int64_t id, bind_id;
    int32_t name_code, cat_code, pid_code, tid_code;
    uint8_t ph;
} Ev;

typedef struct { uint8_t key; uint32_t off, len; } Extra;        /* a verbatim extra key */
typedef struct { uint32_t off; uint16_t len, key; int64_t value; } ArgId;  /* an args id value: where, which key */

#define MAX_DEPTH 512
#define MAX_DIGITS 18

/* ---- interning ---------------------------------------------------------------------- */

typedef struct { const uint8_t *s; uint32_t len; int32_t code; } Slot;
typedef struct { const uint8_t *s; uint32_t len; } Key;
/* open addressing over token texts; keys[code] is the code's text, in first-seen order;
 * last: the slot found last (pids and tids repeat from one event to the next) */
typedef struct { Slot *slots; size_t mask, count; Key *keys; size_t kcap; Slot last; } Table;

/* a == b for n bytes, by (overlapping) word loads: no call for the short texts of a trace */
static inline int same_bytes(const uint8_t *a, const uint8_t *b, size_t n) {
#ifdef __SSE2__
    if (n >= 16) {  /* long kernel names: 16 bytes a step, the last 16 overlapping */
        for (size_t k = 0; k + 16 <= n; k += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(a + k)), y = _mm_loadu_si128((const __m128i *)(b + k));
            if (_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) != 0xFFFF) return 0;
        }
        __m128i x = _mm_loadu_si128((const __m128i *)(a + n - 16)), y = _mm_loadu_si128((const __m128i *)(b + n - 16));
        return _mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) == 0xFFFF;
    }
#endif
    if (n >= 8) {
        uint64_t x, y;
        for (size_t k = 0; k + 8 <= n; k += 8) {
            memcpy(&x, a + k, 8);
            memcpy(&y, b + k, 8);
            if (x != y) return 0;
        }
        memcpy(&x, a + n - 8, 8);
        memcpy(&y, b + n - 8, 8);
        return x == y;
    }
    if (n >= 4) {
        uint32_t x, y, u, v;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        memcpy(&u, a + n - 4, 4);
        memcpy(&v, b + n - 4, 4);
        return x == y && u == v;
    }
    for (size_t k = 0; k < n; k++) if (a[k] != b[k]) return 0;
    return 1;
}

/* 8 bytes a step (the byte-wise FNV this replaced was a fifth of the scan: names are long) */
static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;  /* the last 0-7 bytes by (overlapping) word reads, not a byte copy */
    if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        v = ((uint64_t)a << 32) | b;
    } else if (n) {
        v = ((uint64_t)s[0] << 16) | ((uint64_t)s[n >> 1] << 8) | s[n - 1];
    }
    h = (h ^ v) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
}

static int table_init(Table *t) {
    t->mask = 1023;
    t->count = 0;
    t->slots = calloc(t->mask + 1, sizeof(Slot));
    t->kcap = 256;
    t->keys = malloc(t->kcap * sizeof(Key));
    t->last.s = NULL;
    return t->slots != NULL && t->keys != NULL;
}

static void table_free(Table *t) {
    free(t->slots);
    free(t->keys);
    t->slots = NULL;
    t->keys = NULL;
}

/* The code of s (a new one, count, when first seen); -1 when out of memory. */
static int32_t intern(Table *t, const uint8_t *s, uint32_t len, int *fresh) {
    if (t->last.s && t->last.len == len && same_bytes(t->last.s, s, len)) { *fresh = 0; return t->last.code; }
    if ((t->count + 1) * 2 > t->mask + 1) {
        size_t nm = t->mask * 2 + 1;
        Slot *ns = calloc(nm + 1, sizeof(Slot));
        if (!ns) return -1;
        for (size_t k = 0; k <= t->mask; k++) {
            if (!t->slots[k].s) continue;
            size_t h = hash_bytes(t->slots[k].s, t->slots[k].len) & nm;
            while (ns[h].s) h = (h + 1) & nm;
            ns[h] = t->slots[k];
        }
        free(t->slots);
        t->slots = ns;
        t->mask = nm;
    }
    size_t h = hash_bytes(s, len) & t->mask;
    while (t->slots[h].s) {
        if (t->slots[h].len == len && same_bytes(t->slots[h].s, s, len)) {
            t->last = t->slots[h];
            *fresh = 0;
            return t->slots[h].code;
        }
        h = (h + 1) & t->mask;
    }
    if (t->count == t->kcap) {
        Key *nk = realloc(t->keys, t->kcap * 2 * sizeof(Key));
        if (!nk) return -1;
        t->keys = nk;
        t->kcap *= 2;
    }
    t->keys[t->count].s = s;
    t->keys[t->count].len = len;
    t->slots[h].s = s;
    t->slots[h].len = len;
    t->slots[h].code = (int32_t)t->count++;
    t->last = t->slots[h];
    *fresh = 1;
    return t->slots[h].code;
}

/* Tokens are interned by a small table of the tokens met last, by their length and their
 * first and last 8 bytes (no loop over a long kernel name for its hash, no call), each
 * checked whole; missing there, by intern(). The code of a text never changes within a scan. */
#define NAME_HINTS 256
#define SHORT_HINTS 64    /* cats, pids, tids: few */
typedef struct { uint64_t head, tail; const uint8_t *s; uint32_t len; int32_t code; } NameHint;

static const uint8_t NULL_KEY[] = "\0null";   /* never a token's text: tokens have no NUL */
static const uint8_t ZERO_KEY[] = "0";

/* Kineto writes the events of a kind with the same bytes between one value and the next
 * (",\n    \"name\": "), and the args of a kind with the same keys in the same order. A Sep
 * is that text as the walk met it last time in the same place: from a value's end (or the
 * object's '{') over whitespace, ',', whitespace, a key without escapes, whitespace, ':'
 * and whitespace to the next value. Where the same bytes are there again and the byte
 * after them is not whitespace, walking them would take the same steps to the same key,
 * with no error on the way: one compare of 32 bytes stands for the ~50 instructions of
 * the walk (ws, the ',', ws, the key's string and lookup, the ':'). */
#define SEP_MAX 32
/* the places: an event's by the previous key and ph & 7 (X s f i M differ; a place is met
 * at most once in an event, the first key's alone); the args' by a hash of the event's cat
 * for the first key (ARG_STATES of them, apart: only their texts start with the args' '{'),
 * then by a hash of that and of the keys so far (ARG_STATES more). (The args' by the cat
 * and the name too, a kernel's "grid" going with its name, and more of them: more of the
 * values met, and a slower scan: 1.10 against 1.15 GB/s.) */
#define EV_SEPS ((K_COUNT + 1) * 8)
#define ARG_BITS 7
#define ARG_STATES (1 << ARG_BITS)
#define ARG_SEPS (2 * ARG_STATES)
/* Many values repeat too (ph, cat, pid, tid; in args "Fwd thread id": 0, a kernel's
 * "registers per thread": 128, "grid": [64, 1, 1]). A second Sep of each place, Value, holds the
 * text on to the value's end and the byte after it: the same bytes parse to the same value
 * ending at the same place, and the walk records nothing but its span (ph, cat, pid, tid) or
 * nothing at all (args values that are no id, nor a string spelling an id key). A place
 * whose values keep changing (ts, "Ev Idx") stops being tried after 4 misses in a row. */
typedef struct {
    _Alignas(16) uint8_t text[SEP_MAX];
    uint32_t need;      /* a bit per byte compared: (1 << len) - 1; a Value's one more */
    uint8_t len;        /* the bytes taken; 0: nothing learned */
    uint8_t key;        /* the event key; in args, the ARG_ID_KEYS index + 1, or 0 */
    uint8_t voff, vlen; /* a Value: its value's span in the text */
    uint8_t misses;     /* a Value: misses in a row; from VALUE_MISSES on, no more tries */
    uint8_t marks;      /* in args: MARK_BRACE, MARK_BACKSLASH of the text taken (text_marks) */
    uint16_t next;      /* in args: the state after this key */
    int32_t code;       /* an event's Value: its value's code in its table once interned, else -1 */
} Sep;
#define VALUE_MISSES 4

typedef struct {
    const uint8_t *base, *p, *end;
    const char *why;            /* the reason the core gives up, or NULL */
    Ev *ev; size_t n, cap;
    Extra *ex; size_t nex, capex;
    ArgId *ai; size_t nai, capai;
    uint32_t used_keys;         /* bit per key any event has */
    /* interned while the event's bytes are in cache: names, cats (their own first-seen
     * order; merged after the scan), pids, tids */
    Table t_name, t_cat, t_pid, t_tid;
    uint8_t stack[MAX_DEPTH];
    /* the key that followed each key (K_COUNT: the event's start) last time: Kineto writes
     * an event kind's keys in one order, so the next key is tried first by one compare */
    uint8_t next_key[K_COUNT + 1];
    NameHint name_hint[NAME_HINTS], cat_hint[SHORT_HINTS], pid_hint[SHORT_HINTS], tid_hint[SHORT_HINTS];
    Sep ev_sep[EV_SEPS], arg_sep[ARG_SEPS];
    Sep ev_value[EV_SEPS], arg_value[ARG_SEPS];
    /* a Tail: from an event's last value over its '}', the ',' and whitespace, with the next
     * event's '{' (the document's loop met them last time after the same place) */
    Sep ev_tail[EV_SEPS];
    const uint8_t *tail;    /* where the last event's Tail starts, */
    Sep *tail_sep;          /* and the place it is learned for (NULL: none) */
    int at_event;           /* 1: a Tail was met: ps->p is at the next event's '{' */
} P;

#define FAIL(ps, msg) do { if (!(ps)->why) (ps)->why = (msg); return 0; } while (0)

static inline int is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Kineto pretty-prints: a newline and 4-8 spaces before every key. Most calls meet no
 * whitespace at all (any byte above ' ' is none); a run is skipped 16 bytes a step. */
static inline void ws(P *ps) {
    const uint8_t *p = ps->p, *e = ps->end;
    if (e - p >= 2) {  /* one bound check for the two bytes the common cases read */
        if (p[0] > ' ') return;
        if (p[1] > ' ' && is_ws(p[0])) { ps->p = p + 1; return; }  /* the space after ':' */
    }
#ifdef __SSE2__
    while (e - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\n'))),
                                 _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\r')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\t'))));
        unsigned other = (unsigned)_mm_movemask_epi8(w) ^ 0xFFFFu;
        if (other) { ps->p = p + __builtin_ctz(other); return; }
        p += 16;
    }
#endif
    while (p < e && is_ws(*p)) p++;
    ps->p = p;
}

/* The ':' after a key and the whitespace around it, up to the value (which must follow).
 * Kineto writes ": " and a value, compact JSON ":" and a value: those are seen in one
 * look; anything else is walked as ws(), ':', ws() with their reasons. */
static inline int colon(P *ps, const char *expected) {
    const uint8_t *p = ps->p, *e = ps->end;
    if (e - p >= 3 && p[0] == ':') {
        if (p[1] > ' ') { ps->p = p + 1; return 1; }
        if (p[1] == ' ' && p[2] > ' ') { ps->p = p + 2; return 1; }
    }
    ws(ps);
    if (ps->p >= ps->end || *ps->p != ':') FAIL(ps, expected);
    ps->p++;
    ws(ps);
    if (ps->p >= ps->end) FAIL(ps, "unexpected end");
    return 1;
}

/* the first min(n, 8) bytes at s as a word (the rest zero); e: the buffer's end */
static inline uint64_t head_word(const uint8_t *s, size_t n, const uint8_t *e) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (e - s >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        return n >= 8 ? v : v & ((1ULL << (8 * n)) - 1);
    }
#endif
    return word_of((const char *)s, n < 8 ? n : 8);
}

/* sp's text becomes the bytes at s of which the first `compared` (<= SEP_MAX, within the
 * buffer) are checked when the place is met again (learned_at); len: where the walk goes
 * on from. The bytes past them are never compared (need). */
static inline void take_text(Sep *sp, const uint8_t *s, size_t len, size_t compared, const uint8_t *e) {
    if (e - s >= SEP_MAX) memcpy(sp->text, s, SEP_MAX);  /* a fixed size: two moves, no call */
    else memcpy(sp->text, s, compared);
    sp->need = compared == 32 ? 0xFFFFFFFFu : (1u << compared) - 1;
    sp->len = (uint8_t)len;
}

/* Which of the bytes the args' checks look for (a '{' past the args' own, a backslash) a
 * text of len bytes holds: a text in args starts with the args' '{' or after a value, where
 * a '{' cannot be, so its first byte is left out of the '{' search. */
#define MARK_BRACE 1
#define MARK_BACKSLASH 2
static unsigned text_marks(const uint8_t *t, size_t len, const uint8_t *e) {
#ifdef __SSE2__
    if (len <= 32 && e - t >= 32) {  /* most: one look at 32 bytes */
        __m128i lo = _mm_loadu_si128((const __m128i *)t), hi = _mm_loadu_si128((const __m128i *)(t + 16));
        __m128i br = _mm_set1_epi8('{'), bs = _mm_set1_epi8('\\');
        uint32_t in = len == 32 ? 0xFFFFFFFFu : (1u << len) - 1;
        uint32_t b = ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(lo, br)) | (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(hi, br)) << 16) & in & ~1u;
        uint32_t k = ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(lo, bs)) | (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(hi, bs)) << 16) & in;
        return (b ? MARK_BRACE : 0) | (k ? MARK_BACKSLASH : 0);
    }
#endif
    return (len > 1 && memchr(t + 1, '{', len - 1) ? MARK_BRACE : 0) | (memchr(t, '\\', len) ? MARK_BACKSLASH : 0);
}

/* 1 when the bytes at s are the `compared` bytes sp learned (need), 32 bytes readable there
 * and the one after them (the callers' e - s > SEP_MAX) */
static ALWAYS_INLINE int learned_at(const Sep *sp, const uint8_t *s, size_t compared) {
#ifdef __SSE2__
    (void)compared;
    unsigned eq = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)s),
                                                             _mm_load_si128((const __m128i *)sp->text))) |
                  (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(s + 16)),
                                                             _mm_load_si128((const __m128i *)(sp->text + 16)))) << 16;
    return (eq & sp->need) == sp->need;
#else
    return memcmp(s, sp->text, compared) == 0;
#endif
}

/* 1 when the text learned in sp is at s and the byte after it is not whitespace (ws()
 * would stop there, as it did when the text was learned) */
static ALWAYS_INLINE int sep_at(const Sep *sp, const uint8_t *s, const uint8_t *e) {
    return sp->len && e - s > SEP_MAX && learned_at(sp, s, sp->len) && !is_ws(s[sp->len]);
}

/* remember the text s..s+len (the walk took it, with a key without escapes) for sp's place */
static void sep_learn(Sep *sp, const uint8_t *s, size_t len, const uint8_t *e, int key, unsigned next) {
    if (len > SEP_MAX) { sp->len = 0; return; }
    take_text(sp, s, len, len, e);
    sp->key = (uint8_t)key;
    sp->next = (uint16_t)next;
}

/* 1 when the text learned in sp and the byte after it are at s (a Tail: the byte is '{') */
static ALWAYS_INLINE int text_at(const Sep *sp, const uint8_t *s, const uint8_t *e) {
    return sp->len && e - s > SEP_MAX && learned_at(sp, s, (size_t)sp->len + 1);
}

/* remember s..t and the byte at t (t < the buffer's end) for sp's place */
static void text_learn(Sep *sp, const uint8_t *s, const uint8_t *t, const uint8_t *e) {
    size_t len = (size_t)(t - s);
    if (len + 1 > SEP_MAX) { sp->len = 0; return; }
    take_text(sp, s, len, len + 1, e);
}

/* 1 when the Value learned in sp (its text and the byte after its value) is at s */
static ALWAYS_INLINE int value_at(Sep *sp, const uint8_t *s, const uint8_t *e) {
    if (!sp->len) return 0;
    if (e - s > SEP_MAX && learned_at(sp, s, (size_t)sp->len + 1)) { sp->misses = 0; return 1; }
    sp->misses++;
    return 0;
}

/* remember the text s0..v1 and the byte after it (the walk took it: a Sep's text, then a
 * value v0..v1 it records by its span alone) for sp's place */
static Sep *value_learn_text(Sep *sp, const uint8_t *s0, const uint8_t *v0, const uint8_t *v1, const uint8_t *e,
                             int key, unsigned next) {
    size_t len = (size_t)(v1 - s0);
    if (v1 >= e || len + 1 > SEP_MAX) { sp->len = 0; return NULL; }
    take_text(sp, s0, len, len + 1, e);
    sp->key = (uint8_t)key;
    sp->next = (uint16_t)next;
    sp->voff = (uint8_t)(v0 - s0);
    sp->vlen = (uint8_t)(v1 - v0);
    sp->code = -1;
    return sp;
}

/* value_learn_text, where the place's values have not kept changing (no call for those that have) */
static ALWAYS_INLINE Sep *value_learn(Sep *sp, const uint8_t *s0, const uint8_t *v0, const uint8_t *v1, const uint8_t *e,
                                      int key, unsigned next) {
    if (sp->misses >= VALUE_MISSES) { sp->len = 0; return NULL; }
    return value_learn_text(sp, s0, v0, v1, e, key, next);
}

/* Validate one UTF-8 sequence starting at p (p[0] >= 0x80); returns its length or 0. */
static inline int utf8_seq(const uint8_t *p, const uint8_t *e) {
    uint8_t c = p[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (e - p < 2 || (p[1] & 0xC0) != 0x80) return 0;
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (e - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;        /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0;       /* surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (e - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;        /* overlong */
        if (c == 0xF4 && p[1] >= 0x90) return 0;       /* beyond U+10FFFF */
        return 4;
    }
    return 0;
}

static inline int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string at ps->p (which is '"'); on success ps->p is past the closing quote and
 * *escaped says whether it held any backslash escape. Strict JSON: no raw control
 * characters, valid escapes, valid UTF-8 (a \u escape is checked for syntax only). */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* any byte of v that is '"', '\\', below 0x20 or from 0x80 (the bytes a string scan stops at) */
static inline uint64_t special8(uint64_t v) {
    uint64_t q = v ^ (ONES * '"'), b = v ^ (ONES * '\\');
    return ((q - ONES) & ~q & HIGHS) | ((b - ONES) & ~b & HIGHS) | ((v - ONES * 0x20) & ~v & HIGHS) | (v & HIGHS);
}

#ifdef __SSE2__
/* bytes of v that are '"', '\\', below 0x20 or from 0x80 (a signed compare below ' ' takes both) */
static inline unsigned special16(const uint8_t *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i sp = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                              _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
    return (unsigned)_mm_movemask_epi8(sp);
}
#endif

static int string_slow(P *ps, int *escaped) {
    const uint8_t *p = ps->p + 1, *e = ps->end;
    int esc = 0;
    for (;;) {
#ifdef __SSE2__
        while (e - p >= 16) {  /* 16 plain bytes at a time */
            unsigned m = special16(p);
            if (m) { p += __builtin_ctz(m); goto special; }
            p += 16;
        }
#endif
        while (e - p >= 8) {  /* 8 plain bytes at a time */
            uint64_t v;
            memcpy(&v, p, 8);
            if (special8(v)) break;
            p += 8;
        }
        while (p < e && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
#ifdef __SSE2__
    special:
#endif
        if (p >= e) FAIL(ps, "unterminated string");
        uint8_t c = *p;
        if (c == '"') break;
        if (c < 0x20) FAIL(ps, "control character in a string");
        if (c == '\\') {
            esc = 1;
            if (e - p < 2) FAIL(ps, "unterminated string");
            uint8_t d = p[1];
            if (d == 'u') {
                if (e - p < 6) FAIL(ps, "bad \\u escape");
                for (int k = 2; k < 6; k++) if (hexval(p[k]) < 0) FAIL(ps, "bad \\u escape");
                p += 6;
            } else if (d == '"' || d == '\\' || d == '/' || d == 'b' || d == 'f' || d == 'n' || d == 'r' || d == 't') {
                p += 2;
            } else {
                FAIL(ps, "bad escape");
            }
            continue;
        }
        int len = utf8_seq(p, e);
        if (!len) FAIL(ps, "invalid UTF-8");
        p += len;
    }
    ps->p = p + 1;
    *escaped = esc;
    return 1;
}

/* Most strings of a trace (keys, ph, pids, short names) are plain ASCII and end within 16
 * bytes: one compare of 16 bytes finds their closing quote; the rest take string_slow. */
static inline int string(P *ps, int *escaped) {
#ifdef __SSE2__
    const uint8_t *p = ps->p + 1;
    if (ps->end - p >= 16) {
        unsigned m = special16(p);
        if (m) {
            unsigned k = (unsigned)__builtin_ctz(m);
            if (p[k] == '"') { ps->p = p + k + 1; *escaped = 0; return 1; }
        }
    }
#endif
    return string_slow(ps, escaped);
}

/* the first byte from p that is not an ASCII digit, or e (the end) */
static ALWAYS_INLINE const uint8_t *digits_end(const uint8_t *p, const uint8_t *e) {
#ifdef __SSE2__
    while (e - p >= 16) {  /* a signed compare: bytes from 0x80 are below '0' */
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i d = _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8('0' - 1)), _mm_cmplt_epi8(v, _mm_set1_epi8('9' + 1)));
        unsigned other = (unsigned)_mm_movemask_epi8(d) ^ 0xFFFFu;
        if (other) return p + __builtin_ctz(other);
        p += 16;
    }
#endif
    while (p < e && *p >= '0' && *p <= '9') p++;
    return p;
}

/* A number at ps->p. *is_int: no fraction or exponent; *digits: digits of an integer's
 * magnitude; *canonical: an integer the Python path writes back with the same text
 * (not "-0"). */
static ALWAYS_INLINE int number(P *ps, int *is_int, int *digits, int *canonical) {
    const uint8_t *p = ps->p, *e = ps->end;
    int neg = 0;
    if (p < e && *p == '-') { neg = 1; p++; }
    if (p >= e || *p < '0' || *p > '9') FAIL(ps, "bad number");
    const uint8_t *d0 = p;
    if (*p == '0') p++;
    else p = digits_end(p, e);
    int nd = (int)(p - d0);
    int isint = 1;
    if (p < e && *p == '.') {
        isint = 0; p++;
        if (p >= e || *p < '0' || *p > '9') FAIL(ps, "bad number");
        p = digits_end(p, e);
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        isint = 0; p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || *p < '0' || *p > '9') FAIL(ps, "bad number");
        p = digits_end(p, e);
    }
    ps->p = p;
    *is_int = isint;
    *digits = nd;
    *canonical = isint && !(neg && nd == 1 && *d0 == '0');
    return 1;
}

static int literal(P *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) FAIL(ps, "bad literal");
    ps->p += n;
    return 1;
}

/* Skip any JSON value, iteratively (an explicit stack of bounded depth). *braces counts
 * the objects met (the Python path rewrites args ids in the bytes only for flat args). */
static inline int arg_id_key(const uint8_t *s, size_t n);

static int skip_value(P *ps, int *braces, int *tokens) {
    int depth = 0, esc;
    for (;;) {
        ws(ps);
        if (ps->p >= ps->end) FAIL(ps, "unexpected end");
        uint8_t c = *ps->p;
        if (c == '{' || c == '[') {
            if (depth >= MAX_DEPTH) FAIL(ps, "nested too deep");
            if (c == '{') (*braces)++;
            ps->stack[depth++] = c;
            ps->p++;
            ws(ps);
            if (ps->p < ps->end && *ps->p == (c == '{' ? '}' : ']')) { ps->p++; depth--; goto after_value; }
            if (c == '{') goto object_key;
            continue;
        } else if (c == '"') {
            const uint8_t *s0 = ps->p;
            if (!string(ps, &esc)) return 0;
            if (tokens && arg_id_key(s0 + 1, (size_t)(ps->p - s0) - 2) >= 0) (*tokens)++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            int a, b, d;
            if (!number(ps, &a, &b, &d)) return 0;
        } else if (c == 't') { if (!literal(ps, "true")) return 0; }
        else if (c == 'f') { if (!literal(ps, "false")) return 0; }
        else if (c == 'n') { if (!literal(ps, "null")) return 0; }
        else FAIL(ps, "unexpected character");
    after_value:
        for (;;) {
            if (depth == 0) return 1;
            ws(ps);
            if (ps->p >= ps->end) FAIL(ps, "unexpected end");
            uint8_t open = ps->stack[depth - 1];
            c = *ps->p;
            if (c == ',') {
                ps->p++;
                if (open == '{') goto object_key;
                break;  /* next array element */
            }
            if (c == (open == '{' ? '}' : ']')) { ps->p++; depth--; continue; }
            FAIL(ps, "expected , or a closing bracket");
        }
        continue;
    object_key:
        ws(ps);
        if (ps->p >= ps->end || *ps->p != '"') FAIL(ps, "expected a key");
        if (!string(ps, &esc)) return 0;
        ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') FAIL(ps, "expected :");
        ps->p++;
    }
}

static int grow_to(void **arr, size_t *cap, size_t need, size_t size) {
    size_t n = *cap ? *cap : 1024;
    while (n < need) n *= 2;
    void *q = realloc(*arr, n * size);
    if (!q) return 0;
    *arr = q;
    *cap = n;
    return 1;
}

/* room for need elements: the common case (there is) without a call */
static ALWAYS_INLINE int grow(void **arr, size_t *cap, size_t need, size_t size) {
    return need <= *cap || grow_to(arr, cap, need, size);
}

static int64_t parse_int(const uint8_t *s, size_t n) {
    int neg = 0;
    if (n && *s == '-') { neg = 1; s++; n--; }
    int64_t v = 0;
    for (size_t k = 0; k < n; k++) v = v * 10 + (s[k] - '0');   /* <= 18 digits: no overflow */
    return neg ? -v : v;
}

static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                  1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The double a JSON number's text denotes, correctly rounded: Clinger's fast path (a
 * mantissa of at most 2**53 and a power of ten of at most 22 are both exact, so one IEEE
 * operation rounds once) for the usual "1700000000123.456", else Python's own dtoa. */
static int to_double(P *ps, const uint8_t *s, size_t n, double *out) {
    const uint8_t *p = s, *e = s + n;
    int neg = 0;
    if (p < e && *p == '-') { neg = 1; p++; }
    uint64_t m = 0;
    int nd = 0, frac = 0;
    while (p < e && *p >= '0' && *p <= '9') { if (nd < 19) m = m * 10 + (uint64_t)(*p - '0'); nd += m || *p != '0'; p++; }
    if (p < e && *p == '.') {
        p++;
        while (p < e && *p >= '0' && *p <= '9') { if (nd < 19) m = m * 10 + (uint64_t)(*p - '0'); nd += m || *p != '0'; frac++; p++; }
    }
    if (p == e && nd <= 19 && m <= ((uint64_t)1 << 53) && frac <= 22) {
        double v = (double)m / POW10[frac];
        *out = neg ? -v : v;
        return 1;
    }
    char buf[64];
    char *heap = NULL, *t = buf;
    if (n >= sizeof buf) {
        heap = malloc(n + 1);
        if (!heap) FAIL(ps, "out of memory");
        t = heap;
    }
    memcpy(t, s, n);
    t[n] = 0;
    char *endp = NULL;
    double v = PyOS_string_to_double(t, &endp, NULL);  /* locale-independent */
    int ok = endp == t + n && !PyErr_Occurred();
    PyErr_Clear();
    free(heap);
    if (!ok || !isfinite(v)) FAIL(ps, "number out of range");
    *out = v;
    return 1;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* the value of the n (1-8) digits at p, 8 bytes readable there: shifted up so that zero bytes
 * lead them, then 8 digits at once (SWAR) */
static inline uint64_t up_to_eight_digits(const uint8_t *p, size_t n) {
    uint64_t v;
    memcpy(&v, p, 8);
    v <<= 8 * (8 - n);
    v = ((v & 0x0F0F0F0F0F0F0F0FULL) * 2561) >> 8;
    v = ((v & 0x00FF00FF00FF00FFULL) * 6553601) >> 16;
    return ((v & 0x0000FFFF0000FFFFULL) * 42949672960001ULL) >> 32;
}

/* the value of the n (0-18) digits at p, 8 bytes readable past them */
static inline uint64_t digits_value(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    size_t head = n % 8;
    if (head) { v = up_to_eight_digits(p, head); p += head; n -= head; }
    for (; n; p += 8, n -= 8) v = v * 100000000 + up_to_eight_digits(p, 8);
    return v;
}

static const uint64_t POW10_INT[19] = {1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
                                       100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL,
                                       1000000000000ULL, 10000000000000ULL, 100000000000000ULL,
                                       1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL,
                                       1000000000000000000ULL};
#endif

/* The common ts/dur, "4464888733311.333": at most 18 digits, no exponent, the digits' integer
 * at most 2**53 and at most 22 of them after the point. Then number() would take it and
 * to_double() take its fast path with the same integer and scale, so this gives the same
 * double in one walk over the digits. 0 (ps->p unmoved) for anything else, which the two
 * take as before. */
static ALWAYS_INLINE int plain_decimal(P *ps, double *out) {
    const uint8_t *p = ps->p, *e = ps->end;
    int neg = 0;
    if (p < e && *p == '-') { neg = 1; p++; }
    if (p >= e || *p < '0' || *p > '9') return 0;
    const uint8_t *d0 = p;
    uint64_t m = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (e - d0 >= 40) {  /* room for every 8-byte load below: the runs of digits found 16 bytes a step, read 8 a step */
#ifdef __SSE2__
        /* both runs of digits from one look at 32 bytes: a run that reaches past them makes
         * more than 18 digits, which the check below turns away as the walk would */
        __m128i lo = _mm_loadu_si128((const __m128i *)d0), hi = _mm_loadu_si128((const __m128i *)(d0 + 16));
        __m128i below = _mm_set1_epi8('0' - 1), above = _mm_set1_epi8('9' + 1);
        uint32_t digit = (uint32_t)_mm_movemask_epi8(_mm_and_si128(_mm_cmpgt_epi8(lo, below), _mm_cmplt_epi8(lo, above))) |
                         (uint32_t)_mm_movemask_epi8(_mm_and_si128(_mm_cmpgt_epi8(hi, below), _mm_cmplt_epi8(hi, above))) << 16;
        if (digit == 0xFFFFFFFFu) return 0;
        size_t whole = (size_t)__builtin_ctz(~digit), fr = 0;
        const uint8_t *q = d0 + whole, *end = q;
        int point = *q == '.';
        if (point) {
            uint32_t after = whole + 1 < 32 ? ~(digit >> (whole + 1)) : 0;
            if (!after) return 0;
            fr = (size_t)__builtin_ctz(after);
            if (whole + 1 + fr >= 32) return 0;
            end = q + 1 + fr;
        }
#else
        const uint8_t *q = digits_end(d0, e), *end = q;
        size_t whole = (size_t)(q - d0), fr = 0;
        int point = q < e && *q == '.';
        if (point) {
            end = digits_end(q + 1, e);
            fr = (size_t)(end - q - 1);
        }
#endif
        if ((whole > 1 && *d0 == '0') || (point && fr == 0) || whole + fr > 18 ||
            (end < e && (*end == '.' || *end == 'e' || *end == 'E')))
            return 0;
        m = digits_value(d0, whole) * POW10_INT[fr] + (fr ? digits_value(q + 1, fr) : 0);
        if (m > ((uint64_t)1 << 53)) return 0;
        double v = (double)m / POW10[fr];
        *out = neg ? -v : v;
        ps->p = end;
        return 1;
    }
#endif
    if (*p == '0') p++;
    else while (p < e && *p >= '0' && *p <= '9' && p - d0 < 19) m = m * 10 + (uint64_t)(*p++ - '0');
    int frac = 0;
    if (p < e && *p == '.') {
        const uint8_t *f0 = ++p;
        while (p < e && *p >= '0' && *p <= '9' && p - d0 < 20) m = m * 10 + (uint64_t)(*p++ - '0');
        frac = (int)(p - f0);
        if (frac == 0) return 0;
    }
    /* 18 digits at most (p - d0 counts the point too), and the number ends here */
    if (p - d0 - (frac > 0) > 18 || (p < e && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E')))
        return 0;
    if (m > ((uint64_t)1 << 53) || frac > 22) return 0;
    double v = (double)m / POW10[frac];
    *out = neg ? -v : v;
    ps->p = p;
    return 1;
}

/* An array of numbers at ps->p ('['), read as skip_value reads it, without its stack: 1
 * past it; 0 with ps->why set where a number is bad (skip_value would stop there the same
 * way); 0 with nothing set for anything else (another element, nesting, the end), which
 * skip_value then reads from the '[' again. */
static int number_list(P *ps) {
    ps->p++;
    ws(ps);
    if (ps->p < ps->end && *ps->p == ']') { ps->p++; return 1; }
    for (;;) {
        ws(ps);
        if (ps->p >= ps->end) return 0;
        uint8_t c = *ps->p;
        if (!(c == '-' || (c >= '0' && c <= '9'))) return 0;
        int a, b, d;
        if (!number(ps, &a, &b, &d)) return 0;
        ws(ps);
        if (ps->p >= ps->end) return 0;
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == ']') { ps->p++; return 1; }
        return 0;
    }
}

/* the ARG_ID_KEYS index of the key s (n bytes, no quotes), or -1 */
static inline int arg_id_key(const uint8_t *s, size_t n) {
    if (n != 11 && n != 14) return -1;
    for (int k = 0; k < 4; k++)
        if (ARG_ID_LEN[k] == n && s[0] == (uint8_t)ARG_ID_KEYS[k][0] && memcmp(ARG_ID_KEYS[k], s, n) == 0) return k;
    return -1;
}

/* args: a flat object. Records the spans of the id keys' integer values; gives up where
 * the Python path would decode and re-encode the args instead (a nested object or any
 * '{' in a string, a \u escape, an id key spelled anywhere but as a top-level key with a
 * plain integer value of at most 18 digits). */
/* an args Value learned, with its marks */
static inline void learn_arg_value(Sep *vp, const uint8_t *s0, const uint8_t *v0, const uint8_t *v1, const uint8_t *e, unsigned st) {
    if (value_learn(vp, s0, v0, v1, e, 0, st)) vp->marks = (uint8_t)text_marks(s0, (size_t)(v1 - s0), e);
}

static int parse_args(P *ps, Ev *ev) {
    const uint8_t *start = ps->p;
    uint32_t first = (uint32_t)ps->nai;
    int value_tokens = 0;  /* strings among the values that spell an id key */
    /* MARK_BRACE, MARK_BACKSLASH of the bytes walked: the '{' and '\\' the checks at the end
     * look for can only be in strings (or a value skip_value walks), or in a learned text */
    unsigned marks = 0;
    /* the Seps of args: the state is a hash of the event's cat (Kineto writes it before the
     * args; a kernel's args differ from a cpu_op's) and of the keys so far */
    unsigned st = ARG_STATES + ((ev->flags & F_CAT) ? (unsigned)((head_word(ps->base + ev->cat_off, ev->cat_len, ps->end)
                                                                  * KEY_HASH_MUL) >> (64 - ARG_BITS)) : 0);
    for (int first_key = 1;; first_key = 0) {
        const uint8_t *s0 = ps->p;  /* the args' '{' or the last value's end */
        Sep *vp = &ps->arg_value[st], *sp = &ps->arg_sep[st];
        int is_id, key_esc = 0;
        if (value_at(vp, s0, ps->end)) {  /* the key and its value as last time here */
            ps->p = s0 + vp->len;
            st = vp->next;
            marks |= vp->marks;
            continue;
        }
        if (sep_at(sp, s0, ps->end)) {
            ps->p = s0 + sp->len;
            is_id = (int)sp->key - 1;
            st = sp->next;
            marks |= sp->marks;
        } else {
            if (first_key) {
                ps->p++;  /* '{' */
                ws(ps);
                if (ps->p < ps->end && *ps->p == '}') { ps->p++; break; }
            } else {
                ws(ps);
                if (ps->p >= ps->end) FAIL(ps, "unexpected end");
                if (*ps->p == ',') ps->p++;
                else if (*ps->p == '}') { ps->p++; break; }
                else FAIL(ps, "expected , or } in args");
            }
            ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') FAIL(ps, "expected a key in args");
            const uint8_t *k0 = ps->p;
            int esc;
            if (!string(ps, &esc)) return 0;
            marks |= text_marks(k0 - 1, (size_t)(ps->p - k0) + 1, ps->end);  /* the key (k0[-1]: not a '{' of its own) */
            size_t klen = (size_t)(ps->p - k0) - 2;
            is_id = arg_id_key(k0 + 1, klen);
            if (!colon(ps, "expected : in args")) return 0;
            unsigned next = (unsigned)(((head_word(k0 + 1, klen, ps->end) ^ klen) + st * 0x9E3779B97F4A7C15ULL)
                                       * KEY_HASH_MUL >> (64 - ARG_BITS));
            if (!esc) {
                sep_learn(sp, s0, (size_t)(ps->p - s0), ps->end, is_id + 1, next);
                sp->marks = (uint8_t)text_marks(s0, (size_t)(ps->p - s0), ps->end);
            }
            st = next;
            key_esc = esc;
        }
        if (is_id >= 0) {
            const uint8_t *v0 = ps->p;
            int isint, digits, canon;
            if (*v0 == '-' || (*v0 >= '0' && *v0 <= '9')) {
                if (!number(ps, &isint, &digits, &canon)) return 0;
            } else {
                FAIL(ps, "an args id that is not a plain integer");
            }
            if (!isint || *v0 == '-' || digits > MAX_DIGITS) FAIL(ps, "an args id that is not a plain integer");
            if (!grow((void **)&ps->ai, &ps->capai, ps->nai + 1, sizeof(ArgId))) FAIL(ps, "out of memory");
            ArgId *a = &ps->ai[ps->nai++];
            a->off = (uint32_t)(v0 - ps->base);
            a->len = (uint16_t)(ps->p - v0);  /* at most MAX_DIGITS, checked above */
            a->key = (uint16_t)is_id;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            /* digits only (checked above): 8 at a time where 8 bytes are readable past them */
            a->value = ps->end - v0 >= (Py_ssize_t)a->len + 8 ? (int64_t)digits_value(v0, a->len) : parse_int(v0, a->len);
#else
            a->value = parse_int(v0, a->len);
#endif
        } else {
            /* a string value may spell an id key: the Python path's text search would see it */
            uint8_t c = *ps->p;
            const uint8_t *v0 = ps->p;
            if (c == '"') {  /* the scalars as skip_value takes them, without its stack */
                int e0;
                if (!string(ps, &e0)) return 0;
                marks |= text_marks(v0 - 1, (size_t)(ps->p - v0) + 1, ps->end);
                if (arg_id_key(v0 + 1, (size_t)(ps->p - v0) - 2) >= 0) value_tokens++;
                else if (!key_esc) learn_arg_value(vp, s0, v0, ps->p, ps->end, st);
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                int a, b, d;
                if (!number(ps, &a, &b, &d)) return 0;
                if (!key_esc) learn_arg_value(vp, s0, v0, ps->p, ps->end, st);
            } else {
                int braces = 0;
                if (c == '[' && number_list(ps)) {  /* a kernel's "grid": [64, 1, 1] */
                    if (!key_esc) learn_arg_value(vp, s0, v0, ps->p, ps->end, st);
                    continue;
                }
                if (ps->why) return 0;  /* a bad number: skip_value would stop there the same way */
                ps->p = v0;
                if (!skip_value(ps, &braces, &value_tokens)) return 0;
                marks |= text_marks(v0 - 1, (size_t)(ps->p - v0) + 1, ps->end);
                if (braces) FAIL(ps, "nested object in args");
            }
        }
    }
    size_t len = (size_t)(ps->p - start);
    const uint8_t *s = start;
    /* the Python path counts '{' bytes and id-key tokens in the text, strings included */
    if (marks & MARK_BRACE) FAIL(ps, "'{' inside args");
    if (!(marks & MARK_BACKSLASH)) {
        /* No backslash: every '"' opens or closes a string, and a token ("correlation" with
         * its quotes) can only start at an opening one, so the tokens in the text are the
         * strings that spell an id key: the keys recorded above and value_tokens. */
        if (value_tokens) FAIL(ps, "an id key token inside an args string");
    } else {
        /* escapes: any backslash followed by 'u' (\u escapes, or an escaped backslash
         * before a u), or an id key token after a backslash, makes the Python path decode */
        for (const uint8_t *q = s; (q = memchr(q, '\\', (size_t)(s + len - q))) != NULL; q++) {
            if (q + 1 < s + len && q[1] == 'u') FAIL(ps, "\\u in args");
        }
        /* every textual occurrence of an id key token must be one of the keys recorded above:
         * one walk over the span's quotes, each compared with the tokens its next byte allows */
        size_t tokens = 0;
        const uint8_t *end_s = s + len;
        for (const uint8_t *q = s; (q = memchr(q, '"', (size_t)(end_s - q))) != NULL; q++) {
            if (end_s - q < 13) break;  /* the shortest token, "correlation", is 13 bytes */
            uint8_t c = q[1];
            if (c != 'E' && c != 'c' && c != 'C') continue;
            for (int k = 0; k < 4; k++) {
                size_t kl = ARG_ID_LEN[k];
                if ((size_t)(end_s - q) >= kl + 2 && ARG_ID_KEYS[k][0] == (char)c &&
                    memcmp(q + 1, ARG_ID_KEYS[k], kl) == 0 && q[kl + 1] == '"') tokens++;
            }
        }
        if (tokens != ps->nai - first) FAIL(ps, "an id key token inside an args string");
    }
    if (ps->nai - first > 0xFFFF) FAIL(ps, "too many args ids");
    ev->args_off = (uint32_t)(start - ps->base);
    ev->args_len = (uint32_t)len;
    ev->argid_first = first;
    ev->argid_count = (uint16_t)(ps->nai - first);
    ev->flags |= F_ARGS;
    return 1;
}

/* A scalar kept verbatim: a string without escapes, a canonical integer, true, false, null. */
static int verbatim_scalar(P *ps, uint32_t *off, uint32_t *len) {
    const uint8_t *v0 = ps->p;
    uint8_t c = *v0;
    if (c == '"') {
        int esc;
        if (!string(ps, &esc)) return 0;
        if (esc) FAIL(ps, "escaped string value");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        int isint, digits, canon;
        if (!number(ps, &isint, &digits, &canon)) return 0;
        if (!canon || digits > MAX_DIGITS) FAIL(ps, "a number the output would re-encode");
    } else if (c == 't') { if (!literal(ps, "true")) return 0; }
    else if (c == 'f') { if (!literal(ps, "false")) return 0; }
    else if (c == 'n') { if (!literal(ps, "null")) return 0; }
    else FAIL(ps, "an array or object in an extra key");
    *off = (uint32_t)(v0 - ps->base);
    *len = (uint32_t)(ps->p - v0);
    return 1;
}

/* k when the string at k0 is exactly the key k ("ts", quotes included: what string() and
 * key_id_at would find, without waiting for the string's end), ps->p past it; else -1 */
static inline int expected_key(P *ps, const uint8_t *k0, int k) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (k < K_COUNT && ps->end - k0 >= 10) {  /* the 8-byte load at k0 + 1 and the quote after the key */
        size_t n = KEY_LEN[k];
        uint64_t v;
        memcpy(&v, k0 + 1, 8);
        if ((n == 8 ? v : v & ((1ULL << (8 * n)) - 1)) == KEY_WORD[k] && k0[1 + n] == '"') {
            ps->p = k0 + n + 2;
            return k;
        }
    }
#else
    (void)ps; (void)k0; (void)k;
#endif
    return -1;
}

/* the code of the token s (n bytes, n >= 1, within the buffer) in t, by hints (NameHint), else intern() */
static ALWAYS_INLINE int32_t intern_hinted(P *ps, Table *t, unsigned count, NameHint *hints, const uint8_t *s, uint32_t n) {
    uint64_t head = head_word(s, n, ps->end), tail = n > 8 ? head_word(s + n - 8, 8, ps->end) : 0;
    NameHint *h = &hints[((head ^ (tail * 0x9E3779B97F4A7C15ULL) ^ n) * KEY_HASH_MUL) >> 56 & (count - 1)];
    if (h->len == n && h->head == head && h->tail == tail && (n <= 16 || same_bytes(h->s + 8, s + 8, n - 16)))
        return h->code;
    int fresh;
    int32_t c = intern(t, s, n, &fresh);
    if (c >= 0) { h->head = head; h->tail = tail; h->s = s; h->len = n; h->code = c; }
    return c;
}

static int event(P *ps) {
    if (!grow((void **)&ps->ev, &ps->cap, ps->n + 1, sizeof(Ev))) FAIL(ps, "out of memory");
    Ev *ev = &ps->ev[ps->n];
    /* the fields an event may leave unset, zeroed one by one: gcc makes a memset (or a loop
     * of stores) of the whole record a rep stos, a twentieth of the scan */
    ev->name_off = ev->name_len = ev->cat_off = ev->cat_len = 0;
    ev->pid_off = ev->pid_len = ev->tid_off = ev->tid_len = 0;
    ev->args_off = ev->args_len = 0;
    ev->extra_count = ev->argid_count = 0;
    ev->flags = 0;
    ev->ts = ev->dur = 0.0;
    ev->id = ev->bind_id = 0;
    ev->name_code = ev->cat_code = ev->pid_code = ev->tid_code = 0;
    ev->ph = 0;
    ev->extra_first = (uint32_t)ps->nex;
    ev->argid_first = (uint32_t)ps->nai;
    uint32_t seen = 0;
    int prev = K_COUNT;
    /* the Values that gave (or learned) the cat, pid and tid: a Value's text is one token's,
     * whose code, once interned, it keeps (a text's code never changes within a scan) */
    Sep *cat_v = NULL, *pid_v = NULL, *tid_v = NULL;
    unsigned ph7 = 0;  /* ev->ph & 7, for the places */
    if (ps->p >= ps->end || *ps->p != '{') FAIL(ps, "an event that is not an object");
    for (int first = 1;; first = 0) {
        /* from the event's '{' or the last value's end to the next value: the text met here
         * last time (Sep), else walked */
        const uint8_t *s0 = ps->p;
        unsigned place = (unsigned)prev * 8 + ph7;
        Sep *vp = &ps->ev_value[place], *sp = &ps->ev_sep[place];
        int esc, k;
        if (value_at(vp, s0, ps->end)) {  /* the key and its value as last time here */
            k = prev = vp->key;
            if (seen & (1u << k)) FAIL(ps, "a repeated key");
            seen |= 1u << k;
            const uint8_t *v0 = s0 + vp->voff;
            uint32_t off = (uint32_t)(v0 - ps->base);
            switch (k) {
            case K_PH: ev->ph = v0[1]; ph7 = v0[1] & 7u; break;
            case K_CAT: ev->cat_off = off; ev->cat_len = vp->vlen; ev->flags |= F_CAT; cat_v = vp; break;
            case K_PID: ev->pid_off = off; ev->pid_len = vp->vlen; pid_v = vp; break;
            default: ev->tid_off = off; ev->tid_len = vp->vlen; tid_v = vp; break;  /* K_TID */
            }
            ps->p = s0 + vp->len;
            continue;
        }
        if (sep_at(sp, s0, ps->end)) {
            ps->p = s0 + sp->len;
            k = sp->key;
            prev = k;
            if (seen & (1u << k)) FAIL(ps, "a repeated key");
        } else {
            if (first) {
                ps->p++;
                ws(ps);
                if (ps->p < ps->end && *ps->p == '}') FAIL(ps, "an empty event");
            } else {
                Sep *tp = &ps->ev_tail[place];
                if (text_at(tp, s0, ps->end)) {  /* the event's end, the ',' and the next event's '{' */
                    ps->p = s0 + tp->len;
                    ps->at_event = 1;
                    break;
                }
                ws(ps);
                if (ps->p >= ps->end) FAIL(ps, "unexpected end");
                if (*ps->p == ',') ps->p++;
                else if (*ps->p == '}') { ps->p++; ps->tail = s0; ps->tail_sep = tp; break; }
                else FAIL(ps, "expected , or } after a value");
            }
            ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') FAIL(ps, "expected a key");
            const uint8_t *k0 = ps->p;
            k = expected_key(ps, k0, ps->next_key[prev]);
            if (k < 0) {  /* not the expected key: the string, then the key it spells */
                if (!string(ps, &esc)) return 0;
                if (esc) FAIL(ps, "an escaped key");
                k = key_id_at((const char *)k0 + 1, (size_t)(ps->p - k0) - 2, (size_t)(ps->end - k0) - 1);
                if (k < 0) FAIL(ps, "a key the core does not know");
                ps->next_key[prev] = (uint8_t)k;
            }
            prev = k;
            if (seen & (1u << k)) FAIL(ps, "a repeated key");
            if (!colon(ps, "expected :")) return 0;
            sep_learn(sp, s0, (size_t)(ps->p - s0), ps->end, k, 0);
        }
        seen |= 1u << k;
        const uint8_t *v0 = ps->p;
        uint8_t c = *v0;
        int isint, digits, canon;
        switch (k) {
        case K_PH:
            if (c != '"') FAIL(ps, "ph is not a string");
            if (!string(ps, &esc)) return 0;
            if (ps->p - v0 != 3 || v0[1] < 0x20 || v0[1] >= 0x7f || esc) FAIL(ps, "ph is not one ASCII character");
            ev->ph = v0[1];
            ph7 = v0[1] & 7u;
            value_learn(vp, s0, v0, ps->p, ps->end, k, 0);
            break;
        case K_NAME:
        case K_CAT:
            if (c == 'n') {
                if (!literal(ps, "null")) return 0;
                ev->flags |= k == K_NAME ? F_NAME_NULL : F_CAT_NULL;
                break;
            }
            if (c != '"') FAIL(ps, "name or cat is not a string");
            if (!string(ps, &esc)) return 0;
            if (esc) FAIL(ps, "an escaped name or cat");
            if (k == K_NAME) { ev->name_off = (uint32_t)(v0 - ps->base); ev->name_len = (uint32_t)(ps->p - v0); ev->flags |= F_NAME; }
            else {
                ev->cat_off = (uint32_t)(v0 - ps->base); ev->cat_len = (uint32_t)(ps->p - v0); ev->flags |= F_CAT;
                cat_v = value_learn(vp, s0, v0, ps->p, ps->end, k, 0);
            }
            break;
        case K_PID:
        case K_TID:
            if (c == 'n' && k == K_TID) {
                if (!literal(ps, "null")) return 0;
                ev->flags |= F_TID_NULL;
                break;
            }
            if (c == '"') {
                if (!string(ps, &esc)) return 0;
                if (esc) FAIL(ps, "an escaped pid or tid");
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                if (!number(ps, &isint, &digits, &canon)) return 0;
                if (!canon || digits > MAX_DIGITS) FAIL(ps, "a pid or tid that is not a plain integer");
            } else {
                FAIL(ps, "a pid or tid that is not an integer or string");
            }
            if (k == K_PID) { ev->pid_off = (uint32_t)(v0 - ps->base); ev->pid_len = (uint32_t)(ps->p - v0); }
            else { ev->tid_off = (uint32_t)(v0 - ps->base); ev->tid_len = (uint32_t)(ps->p - v0); }
            if (k == K_PID) pid_v = value_learn(vp, s0, v0, ps->p, ps->end, k, 0);
            else tid_v = value_learn(vp, s0, v0, ps->p, ps->end, k, 0);
            break;
        case K_TS:
        case K_DUR:
            if (c == 'n') { if (!literal(ps, "null")) return 0; break; }
            if (!(c == '-' || (c >= '0' && c <= '9'))) FAIL(ps, "ts or dur is not a number");
            if (plain_decimal(ps, k == K_TS ? &ev->ts : &ev->dur)) {
                ev->flags |= k == K_TS ? F_TS : F_DUR;
                break;
            }
            if (!number(ps, &isint, &digits, &canon)) return 0;
            if (isint && digits > MAX_DIGITS) FAIL(ps, "ts or dur out of range");
            if (!to_double(ps, v0, (size_t)(ps->p - v0), k == K_TS ? &ev->ts : &ev->dur)) return 0;
            ev->flags |= k == K_TS ? F_TS : F_DUR;
            break;
        case K_ARGS:
            if (c == 'n') { if (!literal(ps, "null")) return 0; break; }
            if (c != '{') FAIL(ps, "args is not an object");
            if (!parse_args(ps, ev)) return 0;
            break;
        case K_ID:
        case K_BIND_ID:
            if (!(c == '-' || (c >= '0' && c <= '9'))) FAIL(ps, "a flow id that is not an integer");
            if (!number(ps, &isint, &digits, &canon)) return 0;
            if (!canon || digits > MAX_DIGITS) FAIL(ps, "a flow id that is not a plain integer");
            if (k == K_ID) { ev->id = parse_int(v0, (size_t)(ps->p - v0)); ev->flags |= F_ID; }
            else { ev->bind_id = parse_int(v0, (size_t)(ps->p - v0)); ev->flags |= F_BIND_ID; }
            break;
        case K_ID2:
            FAIL(ps, "id2");
        default: {
            uint32_t off, len;
            if (!verbatim_scalar(ps, &off, &len)) return 0;
            if (!grow((void **)&ps->ex, &ps->capex, ps->nex + 1, sizeof(Extra))) FAIL(ps, "out of memory");
            Extra *x = &ps->ex[ps->nex++];
            x->key = (uint8_t)k;
            x->off = off;
            x->len = len;
        }
        }
    }
    if (!(seen & (1u << K_PH))) FAIL(ps, "an event without ph");
    if (!(seen & (1u << K_PID))) ev->flags |= F_PID_ABSENT;
    if (!(seen & (1u << K_TID))) ev->flags |= F_TID_ABSENT;
    {
        const uint8_t *b = ps->base;
        int fresh;
        int32_t c1 = (ev->flags & F_NAME) ? intern_hinted(ps, &ps->t_name, NAME_HINTS, ps->name_hint, b + ev->name_off, ev->name_len)
                                          : intern(&ps->t_name, NULL_KEY, 5, &fresh);
        int32_t c2 = cat_v && cat_v->code >= 0 ? cat_v->code
                   : (ev->flags & F_CAT) ? intern_hinted(ps, &ps->t_cat, SHORT_HINTS, ps->cat_hint, b + ev->cat_off, ev->cat_len)
                   : intern(&ps->t_cat, NULL_KEY, 5, &fresh);
        int32_t c3 = pid_v && pid_v->code >= 0 ? pid_v->code
                   : (ev->flags & F_PID_ABSENT) ? intern(&ps->t_pid, ZERO_KEY, 1, &fresh)
                   : intern_hinted(ps, &ps->t_pid, SHORT_HINTS, ps->pid_hint, b + ev->pid_off, ev->pid_len);
        int32_t c4 = tid_v && tid_v->code >= 0 ? tid_v->code
                   : (ev->flags & F_TID_NULL) ? intern(&ps->t_tid, NULL_KEY, 5, &fresh)
                   : (ev->flags & F_TID_ABSENT) ? intern(&ps->t_tid, ZERO_KEY, 1, &fresh)
                   : intern_hinted(ps, &ps->t_tid, SHORT_HINTS, ps->tid_hint, b + ev->tid_off, ev->tid_len);
        if (c1 < 0 || c2 < 0 || c3 < 0 || c4 < 0) FAIL(ps, "out of memory");
        if (cat_v) cat_v->code = c2;
        if (pid_v) pid_v->code = c3;
        if (tid_v) tid_v->code = c4;
        ev->name_code = c1;
        ev->cat_code = c2;  /* a code of t_cat: Scan.cat_map maps it (in columns()) */
        ev->pid_code = c3;
        ev->tid_code = c4;
    }
    ev->extra_count = (uint16_t)(ps->nex - ev->extra_first);
    if (ev->argid_count == 0) ev->argid_first = (uint32_t)ps->nai;
    ps->used_keys |= seen;
    ps->n++;
    return 1;
}

/* the Python value of a token: a str for a string, an int, or None */
static PyObject *token_value(const uint8_t *s, uint32_t len) {
    if (s == NULL_KEY) Py_RETURN_NONE;
    if (s[0] == '"') return PyUnicode_DecodeUTF8((const char *)s + 1, len - 2, "strict");
    char buf[32];
    memcpy(buf, s, len);
    buf[len] = 0;
    return PyLong_FromString(buf, NULL, 10);
}

/* ---- the Scan object ---------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_buffer buf;
    int has_buf;
    Ev *ev; size_t n;
    Extra *ex; size_t nex;
    ArgId *ai; size_t nai;
    uint32_t used_keys;
    int32_t *cat_map;   /* an event's cat_code (its code among the cats) -> its code in names */
    PyObject *names, *pids, *tids, *top;
} Scan;

static void Scan_dealloc(Scan *self) {
    if (self->has_buf) PyBuffer_Release(&self->buf);
    free(self->ev);
    free(self->ex);
    free(self->ai);
    free(self->cat_map);
    Py_XDECREF(self->names);
    Py_XDECREF(self->pids);
    Py_XDECREF(self->tids);
    Py_XDECREF(self->top);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ScanType;

/* the top-level object: "traceEvents" parsed, other keys' value spans recorded */
static int document(P *ps, PyObject *top) {
    int esc, have_events = 0;
    ws(ps);
    if (ps->p >= ps->end || *ps->p != '{') FAIL(ps, "not a JSON object");
    ps->p++;
    ws(ps);
    if (ps->p < ps->end && *ps->p == '}') FAIL(ps, "no traceEvents");
    for (;;) {
        ws(ps);
        if (ps->p >= ps->end || *ps->p != '"') FAIL(ps, "expected a key");
        const uint8_t *k0 = ps->p;
        if (!string(ps, &esc)) return 0;
        if (esc) FAIL(ps, "an escaped top-level key");
        size_t klen = (size_t)(ps->p - k0) - 2;
        ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') FAIL(ps, "expected :");
        ps->p++;
        ws(ps);
        PyObject *key = PyUnicode_DecodeUTF8((const char *)k0 + 1, (Py_ssize_t)klen, "strict");
        if (!key) { PyErr_Clear(); FAIL(ps, "bad key"); }
        int dup = PyDict_Contains(top, key);
        if (dup) { Py_DECREF(key); FAIL(ps, "a repeated top-level key"); }
        if (klen == 11 && memcmp(k0 + 1, "traceEvents", 11) == 0) {
            have_events = 1;
            if (ps->p >= ps->end || *ps->p != '[') { Py_DECREF(key); FAIL(ps, "traceEvents is not an array"); }
            ps->p++;
            ws(ps);
            if (ps->p < ps->end && *ps->p == ']') ps->p++;
            else for (;;) {
                ws(ps);
                ps->tail_sep = NULL;
                if (!event(ps)) { Py_DECREF(key); return 0; }
                if (ps->at_event) { ps->at_event = 0; continue; }  /* at the next event's '{' (a Tail) */
                ws(ps);
                if (ps->p >= ps->end) { Py_DECREF(key); FAIL(ps, "unexpected end"); }
                if (*ps->p == ',') {
                    ps->p++;
                    ws(ps);
                    /* the text from the event's last value to the next event's '{', for next time */
                    if (ps->tail_sep && ps->p < ps->end && *ps->p == '{') text_learn(ps->tail_sep, ps->tail, ps->p, ps->end);
                    continue;
                }
                if (*ps->p == ']') { ps->p++; break; }
                Py_DECREF(key);
                FAIL(ps, "expected , or ] in traceEvents");
            }
            PyObject *none = Py_None;
            Py_INCREF(none);
            if (PyDict_SetItem(top, key, none) < 0) { Py_DECREF(none); Py_DECREF(key); PyErr_Clear(); FAIL(ps, "out of memory"); }
            Py_DECREF(none);
        } else {
            const uint8_t *v0 = ps->p;
            int braces = 0;
            if (!skip_value(ps, &braces, NULL)) { Py_DECREF(key); return 0; }
            PyObject *span = Py_BuildValue("(nn)", (Py_ssize_t)(v0 - ps->base), (Py_ssize_t)(ps->p - ps->base));
            if (!span || PyDict_SetItem(top, key, span) < 0) { Py_XDECREF(span); Py_DECREF(key); PyErr_Clear(); FAIL(ps, "out of memory"); }
            Py_DECREF(span);
        }
        Py_DECREF(key);
        ws(ps);
        if (ps->p >= ps->end) FAIL(ps, "unexpected end");
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == '}') { ps->p++; break; }
        FAIL(ps, "expected , or } at the top level");
    }
    ws(ps);
    if (ps->p != ps->end) FAIL(ps, "data after the document");
    if (!have_events) FAIL(ps, "no traceEvents");
    return 1;
}

/* the tables of name/cat (names of every event first, then cats: read.from_columns interns
 * their concatenation), pid and tid, in first-seen order */
/* the Python lists of a table's values, in code order */
static PyObject *values_of(Table *t) {
    PyObject *list = PyList_New((Py_ssize_t)t->count);
    if (!list) return NULL;
    for (size_t k = 0; k < t->count; k++) {
        PyObject *v = token_value(t->keys[k].s, t->keys[k].len);
        if (!v) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, (Py_ssize_t)k, v);
    }
    return list;
}

/* the tables of name/cat (names of every event first, then cats: read.from_columns interns
 * their concatenation), pid and tid, in first-seen order. The cats were interned apart:
 * each takes its name's code, or the next one, in the cats' first-seen order. */
static int tables(Scan *s, P *ps) {
    int fresh;
    int32_t *map = malloc((ps->t_cat.count ? ps->t_cat.count : 1) * sizeof(int32_t));
    if (!map) FAIL(ps, "out of memory");
    for (size_t j = 0; j < ps->t_cat.count; j++) {
        map[j] = intern(&ps->t_name, ps->t_cat.keys[j].s, ps->t_cat.keys[j].len, &fresh);
        if (map[j] < 0) { free(map); FAIL(ps, "out of memory"); }
    }
    s->cat_map = map;  /* applied by columns(), in its own pass over the events (not one more here) */
    s->names = values_of(&ps->t_name);
    s->pids = values_of(&ps->t_pid);
    s->tids = values_of(&ps->t_tid);
    if (!s->names || !s->pids || !s->tids) { PyErr_Clear(); FAIL(ps, "a value Python cannot decode"); }
    return 1;
}

static PyObject *core_scan(PyObject *mod, PyObject *arg) {
    (void)mod;
    Scan *s = PyObject_New(Scan, &ScanType);
    if (!s) return NULL;
    s->has_buf = 0; s->ev = NULL; s->ex = NULL; s->ai = NULL; s->n = s->nex = s->nai = 0;
    s->names = s->pids = s->tids = s->top = NULL;
    s->cat_map = NULL;
    if (PyObject_GetBuffer(arg, &s->buf, PyBUF_SIMPLE) < 0) { Py_DECREF(s); return NULL; }
    s->has_buf = 1;
    if ((uint64_t)s->buf.len >= 0xFFFFFFFFull) { Py_DECREF(s); return PyUnicode_FromString("a file of 4 GB or more"); }
    P *ps = calloc(1, sizeof(P));
    if (!ps) { Py_DECREF(s); return PyErr_NoMemory(); }
    ps->base = ps->p = (const uint8_t *)s->buf.buf;
    ps->end = ps->base + s->buf.len;
    int tables_ok = table_init(&ps->t_name) & table_init(&ps->t_cat) & table_init(&ps->t_pid) &
                    table_init(&ps->t_tid);
    s->top = PyDict_New();
    int ok = s->top != NULL && tables_ok;
    if (ok) ok = document(ps, s->top);
    s->ev = ps->ev; s->n = ps->n; s->ex = ps->ex; s->nex = ps->nex; s->ai = ps->ai; s->nai = ps->nai;
    s->used_keys = ps->used_keys;
    if (ok) ok = tables(s, ps);
    table_free(&ps->t_name);
    table_free(&ps->t_cat);
    table_free(&ps->t_pid);
    table_free(&ps->t_tid);
    if (!ok) {
        const char *why = ps->why ? ps->why : "out of memory";
        free(ps);
        Py_DECREF(s);
        if (PyErr_Occurred()) return NULL;
        return PyUnicode_FromString(why);
    }
    free(ps);
    return (PyObject *)s;
}

/* ---- columns out -------------------------------------------------------------------- */

static PyObject *Scan_columns(Scan *s, PyObject *unused) {
    (void)unused;
    size_t n = s->n;
    PyObject *ph = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    PyObject *codes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4 * 4));
    PyObject *times = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8 * 2));
    PyObject *flags = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
    if (!ph || !codes || !times || !flags) goto fail;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(ph);
    int32_t *c = (int32_t *)PyBytes_AS_STRING(codes);
    double *t = (double *)PyBytes_AS_STRING(times);
    uint32_t *f = (uint32_t *)PyBytes_AS_STRING(flags);
    for (size_t i = 0; i < n; i++) {
        Ev *e = &s->ev[i];
        p[i] = e->ph;
        c[i] = e->name_code; c[n + i] = s->cat_map[e->cat_code]; c[2 * n + i] = e->pid_code; c[3 * n + i] = e->tid_code;
        t[i] = e->ts; t[n + i] = e->dur;
        f[i] = e->flags;
    }
    return Py_BuildValue("(NNNN)", ph, codes, times, flags);
fail:
    Py_XDECREF(ph); Py_XDECREF(codes); Py_XDECREF(times); Py_XDECREF(flags);
    return NULL;
}

/* appends event index ``i`` to ``idx`` and ``value`` (a new reference, taken over; NULL
 * when making it failed) to ``val``; 0 on failure, with the error set */
static int append_pair(PyObject *idx, PyObject *val, size_t i, PyObject *value) {
    PyObject *a = PyLong_FromSize_t(i);
    int ok = a && value && PyList_Append(idx, a) == 0 && PyList_Append(val, value) == 0;
    Py_XDECREF(a);
    Py_XDECREF(value);
    return ok;
}

/* (indices, values) of the events with flow id key "id" (0) or "bind_id" (1) */
static PyObject *Scan_flow_ids(Scan *s, PyObject *arg) {
    long which = PyLong_AsLong(arg);
    if (which == -1 && PyErr_Occurred()) return NULL;
    uint32_t flag = which == 0 ? F_ID : F_BIND_ID;
    PyObject *idx = PyList_New(0), *val = PyList_New(0);
    if (!idx || !val) goto fail;
    for (size_t i = 0; i < s->n; i++) {
        Ev *e = &s->ev[i];
        if (!(e->flags & flag)) continue;
        if (!append_pair(idx, val, i, PyLong_FromLongLong(which == 0 ? e->id : e->bind_id))) goto fail;
    }
    return Py_BuildValue("(NN)", idx, val);
fail:
    Py_XDECREF(idx); Py_XDECREF(val);
    return NULL;
}

/* (indices, raw value bytes) of the events with the verbatim extra key named ``key`` */
static PyObject *Scan_extra_tokens(Scan *s, PyObject *arg) {
    Py_ssize_t kl;
    const char *kn = PyUnicode_AsUTF8AndSize(arg, &kl);
    if (!kn) return NULL;
    int k = key_id(kn, (size_t)kl);
    PyObject *idx = PyList_New(0), *val = PyList_New(0);
    if (!idx || !val) goto fail;
    const char *base = (const char *)s->buf.buf;
    for (size_t i = 0; k >= 0 && i < s->n; i++) {
        Ev *e = &s->ev[i];
        for (uint32_t j = 0; j < e->extra_count; j++) {
            Extra *x = &s->ex[e->extra_first + j];
            if (x->key != k) continue;
            if (!append_pair(idx, val, i, PyBytes_FromStringAndSize(base + x->off, x->len))) goto fail;
        }
    }
    return Py_BuildValue("(NN)", idx, val);
fail:
    Py_XDECREF(idx); Py_XDECREF(val);
    return NULL;
}

/* args spans as one int64 array of (offset, length) pairs, (0, 0) where none */
static PyObject *Scan_args_spans(Scan *s, PyObject *unused) {
    (void)unused;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(s->n * 16));
    if (!out) return NULL;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(out);
    for (size_t i = 0; i < s->n; i++) {
        o[2 * i] = s->ev[i].args_off;
        o[2 * i + 1] = (s->ev[i].flags & F_ARGS) ? s->ev[i].args_len : 0;
    }
    return out;
}

/* ---- the writer --------------------------------------------------------------------- */

typedef struct { char *p; size_t len, cap; } Buf;

static inline void put(Buf *b, const void *s, size_t n) { memcpy(b->p + b->len, s, n); b->len += n; }

static inline void put_u64(Buf *b, uint64_t v) {
    char t[24];
    int k = 24;
    do { t[--k] = (char)('0' + v % 10); v /= 10; } while (v);
    put(b, t + k, (size_t)(24 - k));
}

static inline void put_i64(Buf *b, int64_t v) {
    if (v < 0) { b->p[b->len++] = '-'; put_u64(b, (uint64_t)0 - (uint64_t)v); }
    else put_u64(b, (uint64_t)v);
}

/* ns as the µs float the Python path writes (repr of ns / 1000.0): below 2**42 µs the
 * shortest repr is the exact decimal, with at least one fractional digit */
#define US_EXACT (((int64_t)1 << 42) * 1000)
static int put_us(Buf *b, int64_t ns) {
    if (ns <= -US_EXACT || ns >= US_EXACT) {
        double x = (double)ns / 1000.0;
        char *r = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (!r) return 0;
        if (strchr(r, 'e')) { PyMem_Free(r); return -1; }  /* msgspec's exponent form differs */
        put(b, r, strlen(r));
        PyMem_Free(r);
        return 1;
    }
    uint64_t m = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    if (ns < 0) b->p[b->len++] = '-';
    put_u64(b, m / 1000);
    b->p[b->len++] = '.';
    unsigned r = (unsigned)(m % 1000);
    char d[3] = {(char)('0' + r / 100), (char)('0' + r / 10 % 10), (char)('0' + r % 10)};
    int k = 3;
    while (k > 1 && d[k - 1] == '0') k--;
    put(b, d, (size_t)k);
    return 1;
}

#define NAMESPACE_BITS 32
#define ID_LIMIT ((int64_t)1 << NAMESPACE_BITS)

/* transform.namespace_id of an integer: an int below 2**32, else "r<rank>:<value>" */
static void put_id(Buf *b, int64_t v, long rank) {
    if (v >= 0 && v < ID_LIMIT) {
        put_i64(b, (int64_t)(((uint64_t)(rank + 1) << NAMESPACE_BITS) | (uint64_t)v));
    } else {
        put(b, "\"r", 2);
        put_i64(b, rank);
        b->p[b->len++] = ':';
        put_i64(b, v);
        b->p[b->len++] = '"';
    }
}

static int get_array(PyObject *o, Py_buffer *v, Py_ssize_t itemsize, Py_ssize_t n, const char *what) {
    if (PyObject_GetBuffer(o, v, PyBUF_SIMPLE) < 0) return 0;
    if (v->len != itemsize * n) {
        PyBuffer_Release(v);
        PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes, got %zd", what, itemsize * n, v->len);
        return 0;
    }
    return 1;
}

/* write(idx, ts_ns, dur_ns, pid_base, rank, overrides[, tids]) -> bytes or None
 *   idx: int64 event indices to write (the selection), ts_ns/dur_ns: int64 aligned values
 *   for those events (read only where the event has ts / ts and dur), overrides: {event
 *   index: args bytes} for the args the Python side rewrites (process metadata), tids:
 *   {event index: tid bytes} for the spans the Python side moves to lanes of their thread.
 * None when a value would be written in a form the core does not produce (the caller
 * reads the rank with the Python path). */
static PyObject *Scan_write(Scan *s, PyObject *args) {
    PyObject *idx_o, *ts_o, *dur_o, *over, *tid_over = NULL;
    long long pid_base;
    long rank;
    if (!PyArg_ParseTuple(args, "OOOLlO!|O!", &idx_o, &ts_o, &dur_o, &pid_base, &rank, &PyDict_Type, &over,
                          &PyDict_Type, &tid_over)) return NULL;
    if (rank < 0 || rank > 0x7FFFFFFF || pid_base < 0 || pid_base > ((long long)1 << 40)) {
        PyErr_SetString(PyExc_ValueError, "rank or pid_base out of range");
        return NULL;
    }
    Py_buffer ib, tb, db;
    if (PyObject_GetBuffer(idx_o, &ib, PyBUF_SIMPLE) < 0) return NULL;
    if (ib.len % 8) { PyBuffer_Release(&ib); PyErr_SetString(PyExc_ValueError, "idx: int64 expected"); return NULL; }
    Py_ssize_t m = ib.len / 8;
    if (!get_array(ts_o, &tb, 8, m, "ts")) { PyBuffer_Release(&ib); return NULL; }
    if (!get_array(dur_o, &db, 8, m, "dur")) { PyBuffer_Release(&ib); PyBuffer_Release(&tb); return NULL; }
    const int64_t *idx = ib.buf, *ts = tb.buf, *dur = db.buf;
    const char *base = (const char *)s->buf.buf;
    /* the output is written straight into a bytes object sized by an upper bound of every
     * event's size (no growing, no copy; shrunk to its length at the end) */
    size_t bound = 1;
    for (Py_ssize_t j = 0; j < m; j++) {
        int64_t i = idx[j];
        if (i < 0 || (size_t)i >= s->n) continue;  /* reported below */
        Ev *e = &s->ev[i];
        bound += 200 + (size_t)e->name_len + e->cat_len + e->tid_len + e->args_len + (size_t)e->argid_count * 48 + 2 * 48;
        for (uint32_t k = 0; k < e->extra_count; k++) bound += s->ex[e->extra_first + k].len + 16;
    }
    uint8_t *marked = NULL;  /* per scanned event: MARK_ARGS / MARK_TID, has a replacement */
    PyObject *dicts[2] = {over, tid_over};
    for (int d = 0; d < 2; d++) {
        if (!dicts[d] || !PyDict_GET_SIZE(dicts[d])) continue;
        if (!marked) marked = calloc(s->n ? s->n : 1, 1);
        if (!marked) { PyBuffer_Release(&ib); PyBuffer_Release(&tb); PyBuffer_Release(&db); return PyErr_NoMemory(); }
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(dicts[d], &pos, &key, &value)) {
            if (PyBytes_Check(value)) bound += (size_t)PyBytes_GET_SIZE(value);
            long long k = PyLong_Check(key) ? PyLong_AsLongLong(key) : -1;
            if (k == -1 && PyErr_Occurred()) PyErr_Clear();
            if (k >= 0 && (size_t)k < s->n) marked[k] |= (uint8_t)(1 << d);
        }
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound);
    if (!result) { free(marked); PyBuffer_Release(&ib); PyBuffer_Release(&tb); PyBuffer_Release(&db); return NULL; }
    Buf b = {PyBytes_AS_STRING(result), 0, bound};
    int status = 1;
    for (Py_ssize_t j = 0; j < m && status == 1; j++) {
        int64_t i = idx[j];
        if (i < 0 || (size_t)i >= s->n) { PyErr_SetString(PyExc_IndexError, "event index out of range"); status = 0; break; }
        Ev *e = &s->ev[i];
        const char *ov = NULL, *tv = NULL;
        Py_ssize_t ovlen = 0, tvlen = 0;
        if (marked && marked[i]) {  /* only the few events with replacements ask the dicts */
            PyObject *key = PyLong_FromLongLong(i);
            if (!key) { status = 0; break; }
            for (int d = 0; d < 2 && status; d++) {
                if (!(marked[i] & (1 << d))) continue;
                PyObject *v = PyDict_GetItemWithError(dicts[d], key);
                if (!v && PyErr_Occurred()) { status = 0; break; }
                if (!v) continue;
                if (!PyBytes_Check(v)) { PyErr_SetString(PyExc_TypeError, "replacements must be bytes"); status = 0; break; }
                if (d == 0) { ov = PyBytes_AS_STRING(v); ovlen = PyBytes_GET_SIZE(v); }
                else { tv = PyBytes_AS_STRING(v); tvlen = PyBytes_GET_SIZE(v); }
            }
            Py_DECREF(key);
            if (!status) break;
        }
        /* an upper bound of this event's size */
        size_t need = 200 + e->name_len + e->cat_len + (tv ? (size_t)tvlen : e->tid_len)
                      + (ov ? (size_t)ovlen : e->args_len) + (size_t)e->argid_count * 48 + 2 * 48;
        for (uint32_t k = 0; k < e->extra_count; k++) need += s->ex[e->extra_first + k].len + 16;
        if (b.len + need > b.cap) { PyErr_SetString(PyExc_SystemError, "write: size bound exceeded"); status = 0; break; }
        if (j) b.p[b.len++] = ',';
        put(&b, "{\"ph\":\"", 7);
        b.p[b.len++] = (char)e->ph;
        b.p[b.len++] = '"';
        if (e->flags & F_CAT) { put(&b, ",\"cat\":", 7); put(&b, base + e->cat_off, e->cat_len); }
        if (e->flags & F_NAME) { put(&b, ",\"name\":", 8); put(&b, base + e->name_off, e->name_len); }
        put(&b, ",\"pid\":", 7);
        put_i64(&b, pid_base + e->pid_code);
        if (tv) {  /* a lane of the span's thread: its tid, whatever the thread's was */
            put(&b, ",\"tid\":", 7);
            put(&b, tv, (size_t)tvlen);
        } else if (!(e->flags & F_TID_NULL)) {
            put(&b, ",\"tid\":", 7);
            if (e->flags & F_TID_ABSENT) b.p[b.len++] = '0';
            else put(&b, base + e->tid_off, e->tid_len);
        }
        if (e->flags & F_TS) {
            put(&b, ",\"ts\":", 6);
            status = put_us(&b, ts[j]);
            if (status != 1) break;
            if (e->flags & F_DUR) {
                put(&b, ",\"dur\":", 7);
                status = put_us(&b, dur[j]);
                if (status != 1) break;
            }
        }
        if (ov) {
            put(&b, ",\"args\":", 8);
            put(&b, ov, (size_t)ovlen);
        } else if (e->flags & F_ARGS) {
            put(&b, ",\"args\":", 8);
            const char *a = base + e->args_off;
            uint32_t at = e->args_off;
            for (uint32_t k = 0; k < e->argid_count; k++) {
                ArgId *x = &s->ai[e->argid_first + k];
                put(&b, base + at, x->off - at);
                put_id(&b, x->value, rank);
                at = x->off + x->len;
            }
            put(&b, base + at, e->args_off + e->args_len - at);
            (void)a;
        }
        /* the extra keys, in the struct's order: id, then the others as they come in
         * KEY order, with bind_id at its place */
        uint32_t written = 0;
        for (int k = K_FIRST_EXTRA; k < K_COUNT; k++) {
            if (k == K_ID && (e->flags & F_ID)) { put(&b, ",\"id\":", 6); put_id(&b, e->id, rank); continue; }
            if (k == K_BIND_ID && (e->flags & F_BIND_ID)) { put(&b, ",\"bind_id\":", 11); put_id(&b, e->bind_id, rank); continue; }
            if (written == e->extra_count) continue;
            for (uint32_t q = 0; q < e->extra_count; q++) {
                Extra *x = &s->ex[e->extra_first + q];
                if (x->key != k) continue;
                b.p[b.len++] = ',';
                b.p[b.len++] = '"';
                put(&b, KEY_NAMES[k], strlen(KEY_NAMES[k]));
                put(&b, "\":", 2);
                put(&b, base + x->off, x->len);
                written++;
            }
        }
        b.p[b.len++] = '}';
    }
    if (status == 1) {
        if (_PyBytes_Resize(&result, (Py_ssize_t)b.len) < 0) result = NULL;
    } else {
        Py_CLEAR(result);
        if (status == -1) {
            result = Py_None;
            Py_INCREF(result);
        }
    }
    free(marked);
    PyBuffer_Release(&ib);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&db);
    return result;
}

/* sorted indices of the events whose args contain the text ``token`` (Args.with_key) */
static PyObject *Scan_args_with(Scan *s, PyObject *arg) {
    Py_buffer tk;
    if (PyObject_GetBuffer(arg, &tk, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = PyList_New(0);
    const char *base = (const char *)s->buf.buf;
    for (size_t i = 0; out && i < s->n; i++) {
        Ev *e = &s->ev[i];
        if (!(e->flags & F_ARGS) || tk.len == 0 || (size_t)tk.len > e->args_len) continue;
        if (memmem(base + e->args_off, e->args_len, tk.buf, (size_t)tk.len)) {
            PyObject *v = PyLong_FromSize_t(i);
            if (!v || PyList_Append(out, v) < 0) { Py_XDECREF(v); Py_CLEAR(out); }
            else Py_DECREF(v);
        }
    }
    PyBuffer_Release(&tk);
    return out;
}

/* arg_ids(idx, key): for the events idx (int64 indices), the value of the args id key
 * ARG_ID_KEYS[key] as int64 bytes: ARG_ID_ABSENT where the args object lacks it,
 * ARG_ID_NO_ARGS where the event has no args. What Args.key_values decodes from the text
 * (the last of a repeated key, as msgspec takes it): in a rank the core read, every
 * occurrence of an id key's token in the args is a top-level key with a plain integer
 * (parse_args declines anything else), so the recorded ids are the whole answer. */
#define ARG_ID_ABSENT (-1)
#define ARG_ID_NO_ARGS (-2)
static PyObject *Scan_arg_ids(Scan *s, PyObject *args) {
    Py_buffer v;
    int key;
    if (!PyArg_ParseTuple(args, "y*i", &v, &key)) return NULL;
    if (v.len % 8 || key < 0 || key >= 4) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_ValueError, "arg_ids: int64 indices and a key of ARG_ID_KEYS");
        return NULL;
    }
    const int64_t *idx = (const int64_t *)v.buf;
    size_t k = (size_t)v.len / 8;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k * 8));
    if (!out) { PyBuffer_Release(&v); return NULL; }
    int64_t *o = (int64_t *)PyBytes_AS_STRING(out);
    for (size_t j = 0; j < k; j++) {
        if (idx[j] < 0 || (uint64_t)idx[j] >= s->n) {
            PyErr_Format(PyExc_IndexError, "arg_ids: event %lld of %zu", (long long)idx[j], s->n);
            Py_DECREF(out); PyBuffer_Release(&v);
            return NULL;
        }
        const Ev *e = &s->ev[idx[j]];
        int64_t found = (e->flags & F_ARGS) ? ARG_ID_ABSENT : ARG_ID_NO_ARGS;
        for (uint32_t m = 0; m < e->argid_count; m++) {
            const ArgId *x = &s->ai[e->argid_first + m];
            if (x->key == key) found = x->value;
        }
        o[j] = found;
    }
    PyBuffer_Release(&v);
    return out;
}

/* args_array(idx): the JSON array of the args of the events idx (int64 indices), "null" for
 * none: model.Args.joined, in one call (the Python path made a bytes view per event) */
static PyObject *Scan_args_array(Scan *s, PyObject *arg) {
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    if (v.len % 8) { PyBuffer_Release(&v); PyErr_SetString(PyExc_ValueError, "args_array: int64 indices"); return NULL; }
    const int64_t *idx = (const int64_t *)v.buf;
    size_t k = (size_t)v.len / 8, total = 2 + (k ? k - 1 : 0);
    for (size_t j = 0; j < k; j++) {
        if (idx[j] < 0 || (uint64_t)idx[j] >= s->n) {
            PyBuffer_Release(&v);
            PyErr_Format(PyExc_IndexError, "args_array: event %lld of %zu", (long long)idx[j], s->n);
            return NULL;
        }
        Ev *e = &s->ev[idx[j]];
        total += (e->flags & F_ARGS) ? e->args_len : 4;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out) { PyBuffer_Release(&v); return NULL; }
    char *o = PyBytes_AS_STRING(out);
    const char *base = (const char *)s->buf.buf;
    *o++ = '[';
    for (size_t j = 0; j < k; j++) {
        Ev *e = &s->ev[idx[j]];
        if (j) *o++ = ',';
        if (e->flags & F_ARGS) { memcpy(o, base + e->args_off, e->args_len); o += e->args_len; }
        else { memcpy(o, "null", 4); o += 4; }
    }
    *o = ']';
    PyBuffer_Release(&v);
    return out;
}

static PyObject *Scan_len(Scan *s, void *c) { (void)c; return PyLong_FromSize_t(s->n); }
static PyObject *Scan_names(Scan *s, void *c) { (void)c; Py_INCREF(s->names); return s->names; }
static PyObject *Scan_pids(Scan *s, void *c) { (void)c; Py_INCREF(s->pids); return s->pids; }
static PyObject *Scan_tids(Scan *s, void *c) { (void)c; Py_INCREF(s->tids); return s->tids; }
static PyObject *Scan_top(Scan *s, void *c) { (void)c; Py_INCREF(s->top); return s->top; }
static PyObject *Scan_keys(Scan *s, void *c) {
    (void)c;
    PyObject *out = PyList_New(0);
    for (int k = 0; out && k < K_COUNT; k++) {
        if (!(s->used_keys & (1u << k))) continue;
        PyObject *v = PyUnicode_FromString(KEY_NAMES[k]);
        if (!v || PyList_Append(out, v) < 0) { Py_XDECREF(v); Py_CLEAR(out); }
        else Py_DECREF(v);
    }
    return out;
}

/* ---- debug annotations (.pftrace) ----------------------------------------------------- */
/* The Perfetto writer's per-event args work (formats.perfetto.encoder._Annotations.encode
 * of ids.namespace_args(rank, args)), for raw args objects: each top-level key becomes a
 * TrackEvent.debug_annotations entry with an interned name, its value encoded as the
 * Python reference encodes it. An event whose args it cannot spell byte for byte (escapes,
 * repeated keys, integers of more than 18 digits, a number beyond a double, deep nesting,
 * an id key that is not a plain integer below 2**32) stops the batch: the caller encodes
 * that event with the Python path, which also interns its names, and resumes after it, so
 * names are interned in the same order either way. */

typedef struct { uint8_t *p; size_t len, cap; } Out;

static int out_reserve(Out *o, size_t n) {
    if (o->len + n <= o->cap) return 1;
    size_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + n) {
        if (cap > ((size_t)1 << 40)) return 0;
        cap *= 2;
    }
    uint8_t *p = realloc(o->p, cap);
    if (!p) return 0;
    o->p = p; o->cap = cap;
    return 1;
}

static int out_put(Out *o, const void *s, size_t n) {
    if (!out_reserve(o, n)) return 0;
    memcpy(o->p + o->len, s, n);
    o->len += n;
    return 1;
}

static int out_varint(Out *o, uint64_t v) {
    uint8_t t[10];
    int k = 0;
    while (v >= 0x80) { t[k++] = (uint8_t)(v | 0x80); v >>= 7; }
    t[k++] = (uint8_t)v;
    return out_put(o, t, (size_t)k);
}

/* tag, length, then the bytes of ``inner`` */
static int out_field(Out *o, uint8_t tag, const Out *inner) {
    return out_put(o, &tag, 1) && out_varint(o, inner->len) && out_put(o, inner->p, inner->len);
}

typedef struct {
    const uint8_t *p, *end;
    PyObject *iids, *new_names;   /* {str: name field bytes}, [interned entry bytes] */
    long rank;
    int declined;                 /* 1: this event is the Python path's */
} Anns;

#define ANN_DEPTH 64
#define DECLINE(a) do { (a)->declined = 1; return 0; } while (0)

static void ann_ws(Anns *a) {
    while (a->p < a->end && (*a->p == ' ' || *a->p == '\t' || *a->p == '\n' || *a->p == '\r')) a->p++;
}

/* a string token without escapes: its bytes (between the quotes) */
static int ann_string(Anns *a, const uint8_t **s, size_t *n) {
    if (a->p >= a->end || *a->p != '"') DECLINE(a);
    const uint8_t *q = ++a->p;
    while (q < a->end && *q != '"') {
        if (*q == '\\') DECLINE(a);   /* escapes: the Python path decodes them */
        q++;
    }
    if (q >= a->end) DECLINE(a);
    *s = a->p; *n = (size_t)(q - a->p);
    a->p = q + 1;
    return 1;
}

/* the name field (DebugAnnotation.name_iid) of a key, interned on first use */
static int ann_name(Anns *a, Out *o, const uint8_t *s, size_t n) {
    PyObject *key = PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, "surrogatepass");
    if (!key) return -1;
    PyObject *field = PyDict_GetItemWithError(a->iids, key);
    if (!field) {
        if (PyErr_Occurred()) { Py_DECREF(key); return -1; }
        Out f = {0}, entry = {0};
        uint64_t iid = (uint64_t)PyDict_GET_SIZE(a->iids) + 1;
        int ok = out_put(&f, "\x08", 1) && out_varint(&f, iid);
        /* InternedData.debug_annotation_names entry: field 3 { iid, name } */
        Out body = {0};
        ok = ok && out_put(&body, f.p, f.len) && out_put(&body, "\x12", 1) && out_varint(&body, n) && out_put(&body, s, n);
        ok = ok && out_field(&entry, 0x1a, &body);
        PyObject *fb = ok ? PyBytes_FromStringAndSize((const char *)f.p, (Py_ssize_t)f.len) : NULL;
        PyObject *eb = ok ? PyBytes_FromStringAndSize((const char *)entry.p, (Py_ssize_t)entry.len) : NULL;
        free(f.p); free(body.p); free(entry.p);
        if (!ok) { Py_DECREF(key); PyErr_NoMemory(); return -1; }
        if (!fb || !eb || PyDict_SetItem(a->iids, key, fb) < 0 || PyList_Append(a->new_names, eb) < 0) {
            Py_XDECREF(fb); Py_XDECREF(eb); Py_DECREF(key); return -1;
        }
        Py_DECREF(eb);
        field = fb;
        Py_DECREF(fb);  /* the dict holds it */
    }
    Py_DECREF(key);
    return out_put(o, PyBytes_AS_STRING(field), (size_t)PyBytes_GET_SIZE(field)) ? 1 : (PyErr_NoMemory(), -1);
}

/* a number token: 1 int (*iv), 2 float (*dv); 0 declined */
static int ann_number(Anns *a, int64_t *iv, double *dv) {
    const uint8_t *s = a->p;
    const uint8_t *q = s;
    int is_float = 0, digits = 0;
    if (q < a->end && *q == '-') q++;
    while (q < a->end && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' || *q == '-')) {
        if (*q == '.' || *q == 'e' || *q == 'E') is_float = 1;
        if (*q >= '0' && *q <= '9') digits++;
        q++;
    }
    if (q == s || !digits) DECLINE(a);
    a->p = q;
    if (!is_float) {
        if (digits > 18) DECLINE(a);   /* the Python path keeps big integers exact */
        uint64_t m = 0;
        const uint8_t *d = s + (*s == '-');
        for (; d < q; d++) {
            if (*d < '0' || *d > '9') DECLINE(a);
            m = m * 10 + (uint64_t)(*d - '0');
        }
        *iv = *s == '-' ? -(int64_t)m : (int64_t)m;
        return 1;
    }
    char buf[64];
    size_t n = (size_t)(q - s);
    if (n >= sizeof buf) DECLINE(a);
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end = NULL;
    double x = PyOS_string_to_double(buf, &end, NULL);
    if (x == -1.0 && PyErr_Occurred()) { PyErr_Clear(); DECLINE(a); }
    if (end != buf + n || isinf(x) || isnan(x)) DECLINE(a);  /* beyond a double: msgspec refuses it */
    *dv = x;
    return 2;
}

static int ann_value(Anns *a, Out *o, int depth);

/* the entries of an object: ``tag`` { name, value } each (top level: 0x22, nested: 0x5a);
 * id keys namespaced at the top level */
static int ann_object(Anns *a, Out *o, uint8_t tag, int depth) {
    const uint8_t *keys[64];
    size_t lens[64];
    int nkeys = 0;
    a->p++;  /* '{' */
    ann_ws(a);
    if (a->p < a->end && *a->p == '}') { a->p++; return 1; }
    for (;;) {
        const uint8_t *ks;
        size_t kn;
        ann_ws(a);
        if (!ann_string(a, &ks, &kn)) return 0;
        for (int j = 0; j < nkeys; j++)
            if (lens[j] == kn && memcmp(keys[j], ks, kn) == 0) DECLINE(a);  /* the last one wins in Python */
        if (nkeys == 64) DECLINE(a);
        keys[nkeys] = ks; lens[nkeys++] = kn;
        ann_ws(a);
        if (a->p >= a->end || *a->p != ':') DECLINE(a);
        a->p++;
        ann_ws(a);
        Out entry = {0};
        int r = ann_name(a, &entry, ks, kn);
        if (r < 0) { free(entry.p); return -1; }
        int is_id = -1;
        if (tag == 0x22)
            for (int k = 0; k < 4; k++)
                if (ARG_ID_LEN[k] == kn && memcmp(ARG_ID_KEYS[k], ks, kn) == 0) is_id = k;
        if (is_id >= 0) {  /* ids.namespace_id: an int below 2**32 becomes (rank + 1) << 32 | id */
            int64_t v;
            double d;
            if (a->p >= a->end || !((*a->p >= '0' && *a->p <= '9') || *a->p == '-')) { free(entry.p); DECLINE(a); }
            if (ann_number(a, &v, &d) != 1 || v < 0 || v >= ((int64_t)1 << 32)) { free(entry.p); DECLINE(a); }
            uint64_t ns = ((uint64_t)(a->rank + 1) << 32) | (uint64_t)v;
            r = out_put(&entry, "\x20", 1) && out_varint(&entry, ns);
        } else {
            r = ann_value(a, &entry, depth + 1);
        }
        if (r <= 0 || !out_field(o, tag, &entry)) {
            free(entry.p);
            if (r > 0) { PyErr_NoMemory(); return -1; }
            return r;
        }
        free(entry.p);
        ann_ws(a);
        if (a->p < a->end && *a->p == ',') { a->p++; continue; }
        if (a->p < a->end && *a->p == '}') { a->p++; return 1; }
        DECLINE(a);
    }
}

/* a value as _Annotations.value encodes it (the DebugAnnotation fields after the name) */
static int ann_value(Anns *a, Out *o, int depth) {
    if (depth > ANN_DEPTH || a->p >= a->end) DECLINE(a);
    uint8_t c = *a->p;
    if (c == '"') {
        const uint8_t *s;
        size_t n;
        if (!ann_string(a, &s, &n)) return 0;
        return (out_put(o, "\x32", 1) && out_varint(o, n) && out_put(o, s, n)) ? 1 : (PyErr_NoMemory(), -1);
    }
    if (c == '{') return ann_object(a, o, 0x5a, depth);
    if (c == '[') {
        a->p++;
        ann_ws(a);
        if (a->p < a->end && *a->p == ']') { a->p++; return out_put(o, "\x4a\x02[]", 4) ? 1 : (PyErr_NoMemory(), -1); }
        for (;;) {
            Out item = {0};
            ann_ws(a);
            int r = ann_value(a, &item, depth + 1);
            if (r <= 0) { free(item.p); return r; }
            if (!out_field(o, 0x62, &item)) { free(item.p); PyErr_NoMemory(); return -1; }
            free(item.p);
            ann_ws(a);
            if (a->p < a->end && *a->p == ',') { a->p++; continue; }
            if (a->p < a->end && *a->p == ']') { a->p++; return 1; }
            DECLINE(a);
        }
    }
    if (c == 't' && a->end - a->p >= 4 && memcmp(a->p, "true", 4) == 0) { a->p += 4; return out_put(o, "\x10\x01", 2) ? 1 : -1; }
    if (c == 'f' && a->end - a->p >= 5 && memcmp(a->p, "false", 5) == 0) { a->p += 5; return out_put(o, "\x10\x00", 2) ? 1 : -1; }
    if (c == 'n' && a->end - a->p >= 4 && memcmp(a->p, "null", 4) == 0) { a->p += 4; return out_put(o, "\x4a\x04null", 6) ? 1 : -1; }
    int64_t v;
    double d;
    int kind = ann_number(a, &v, &d);
    if (kind == 1) return (out_put(o, "\x20", 1) && out_varint(o, (uint64_t)v)) ? 1 : (PyErr_NoMemory(), -1);
    if (kind == 2) {
        uint8_t b[9] = {0x29};
        memcpy(b + 1, &d, 8);  /* little-endian, as struct.pack("<d") on the machines this builds on */
        return out_put(o, b, 9) ? 1 : (PyErr_NoMemory(), -1);
    }
    return 0;
}

/* annotations(items, start, rank, iids, new_names) -> (list of bytes, stopped)
 *   items: the raw args (bytes-like, or None) of the events, in the order they are encoded;
 *   from items[start], each event's debug annotations; stops at the first event it
 *   declines (``stopped``: its index, len(items) when none), which the caller encodes with
 *   the Python path before calling again from stopped + 1. */
static PyObject *core_annotations(PyObject *mod, PyObject *args) {
    PyObject *items, *iids, *new_names;
    Py_ssize_t start;
    long rank;
    if (!PyArg_ParseTuple(args, "O!nlO!O!", &PyList_Type, &items, &start, &rank, &PyDict_Type, &iids,
                          &PyList_Type, &new_names)) return NULL;
    if (rank < 0 || rank > 0x7FFFFFFF) { PyErr_SetString(PyExc_ValueError, "rank out of range"); return NULL; }
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    Py_ssize_t i = start < 0 ? 0 : start;
    for (; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (item == Py_None) {
            PyObject *e = PyBytes_FromStringAndSize(NULL, 0);
            if (!e || PyList_Append(out, e) < 0) { Py_XDECREF(e); Py_DECREF(out); return NULL; }
            Py_DECREF(e);
            continue;
        }
        Py_buffer view;
        if (PyObject_GetBuffer(item, &view, PyBUF_SIMPLE) < 0) { Py_DECREF(out); return NULL; }
        Anns a = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len, iids, new_names, rank, 0};
        Out o = {0};
        ann_ws(&a);
        int r;
        if (a.p < a.end && *a.p == '{') {
            r = ann_object(&a, &o, 0x22, 0);
            if (r > 0) { ann_ws(&a); if (a.p != a.end) { a.declined = 1; r = 0; } }
        } else {
            r = 0; a.declined = 1;  /* not an object: the Python path says what it is */
        }
        PyBuffer_Release(&view);
        if (r < 0) { free(o.p); Py_DECREF(out); return NULL; }
        if (r == 0) { free(o.p); break; }
        PyObject *e = PyBytes_FromStringAndSize((const char *)o.p, (Py_ssize_t)o.len);
        free(o.p);
        if (!e || PyList_Append(out, e) < 0) { Py_XDECREF(e); Py_DECREF(out); return NULL; }
        Py_DECREF(e);
    }
    return Py_BuildValue("(Nn)", out, i);
}

/* walk(start, end) -> (parents, proper): one thread's slices sorted by (start, -end) as
 * int64 buffers; parents as int64 bytes, -1 for none. torch's stack walk
 * (EventList._populate_cpu_children; nesting.parents_stack_walk): a slice's parent is the
 * innermost open slice it fits in, and slices it starts after or ends past are closed first.
 * proper: no slice ended past one it started inside (nesting.walk, the reference, says so
 * when nesting.parents_nested finds the tree). One pass in place of a dozen array passes. */
static PyObject *core_walk(PyObject *mod, PyObject *args) {
    PyObject *so, *eo;
    if (!PyArg_ParseTuple(args, "OO", &so, &eo)) return NULL;
    Py_buffer sb, eb;
    if (PyObject_GetBuffer(so, &sb, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(eo, &eb, PyBUF_SIMPLE) < 0) { PyBuffer_Release(&sb); return NULL; }
    PyObject *out = NULL;
    int64_t *stack = NULL;
    if (sb.len != eb.len || sb.len % 8) {
        PyErr_SetString(PyExc_ValueError, "walk: start and end are int64 columns of one length");
        goto done;
    }
    Py_ssize_t n = sb.len / 8;
    const int64_t *st = (const int64_t *)sb.buf, *en = (const int64_t *)eb.buf;
    out = PyBytes_FromStringAndSize(NULL, sb.len);
    stack = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!out || !stack) { Py_CLEAR(out); if (!PyErr_Occurred()) PyErr_NoMemory(); goto done; }
    int64_t *parent = (int64_t *)PyBytes_AS_STRING(out);
    Py_ssize_t depth = 0;
    int proper = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        parent[i] = -1;
        while (depth) {
            int64_t top = stack[depth - 1];
            if (st[i] >= en[top]) { depth--; continue; }            /* ended before i starts */
            if (en[i] > en[top]) { proper = 0; depth--; continue; }  /* i crosses it */
            parent[i] = top;
            break;
        }
        stack[depth++] = i;
    }
    free(stack);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&eb);
    return Py_BuildValue("(NO)", out, proper ? Py_True : Py_False);
done:
    free(stack);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&eb);
    return NULL;
}

static PyMethodDef Scan_methods[] = {
    {"columns", (PyCFunction)Scan_columns, METH_NOARGS, "(ph, codes, times, flags) as bytes"},
    {"flow_ids", (PyCFunction)Scan_flow_ids, METH_O, "(indices, ints) of id (0) or bind_id (1)"},
    {"extra_tokens", (PyCFunction)Scan_extra_tokens, METH_O, "(indices, raw bytes) of an extra key"},
    {"args_spans", (PyCFunction)Scan_args_spans, METH_NOARGS, "int64 (offset, length) pairs"},
    {"args_with", (PyCFunction)Scan_args_with, METH_O, "indices of args containing a token"},
    {"args_array", (PyCFunction)Scan_args_array, METH_O, "the JSON array of the args of events (int64 indices)"},
    {"arg_ids", (PyCFunction)Scan_arg_ids, METH_VARARGS,
     "arg_ids(idx, key) -> int64 bytes: the value of ARG_ID_KEYS[key] of each event, -1 absent, -2 no args"},
    {"write", (PyCFunction)Scan_write, METH_VARARGS, "the events as the JSON writer writes them"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Scan_getset[] = {
    {"n", (getter)Scan_len, NULL, "number of events", NULL},
    {"names", (getter)Scan_names, NULL, "name/cat table", NULL},
    {"pids", (getter)Scan_pids, NULL, "pid table", NULL},
    {"tids", (getter)Scan_tids, NULL, "tid table", NULL},
    {"top", (getter)Scan_top, NULL, "top-level keys: (start, end) spans, None for traceEvents", NULL},
    {"keys", (getter)Scan_keys, NULL, "the event keys any event uses", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject ScanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracemerge.native._core.Scan",
    .tp_basicsize = sizeof(Scan),
    .tp_dealloc = (destructor)Scan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One scanned trace document",
    .tp_methods = Scan_methods,
    .tp_getset = Scan_getset,
};

static PyMethodDef core_methods[] = {
    {"scan", core_scan, METH_O, "scan(data) -> Scan, or a str: why the core does not take it"},
    {"annotations", core_annotations, METH_VARARGS,
     "annotations(items, start, rank, iids, new_names) -> (debug annotations of each event, stopped)"},
    {"walk", core_walk, METH_VARARGS, "walk(start, end) -> (parents as int64 bytes, proper): torch's stack walk"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef core_module = {PyModuleDef_HEAD_INIT, "_core", NULL, -1, core_methods};

PyMODINIT_FUNC PyInit__core(void) {
    for (int k = 0; k < K_COUNT; k++)  /* the length table must match the names */
        if (strlen(KEY_NAMES[k]) != KEY_LEN[k]) { PyErr_SetString(PyExc_SystemError, "KEY_LEN"); return NULL; }
    for (int k = 0; k < 4; k++)
        if (strlen(ARG_ID_KEYS[k]) != ARG_ID_LEN[k]) { PyErr_SetString(PyExc_SystemError, "ARG_ID_LEN"); return NULL; }
    key_words_init();
    if (PyType_Ready(&ScanType) < 0) return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (!m) return NULL;
    PyModule_AddIntConstant(m, "F_TS", F_TS);
    PyModule_AddIntConstant(m, "F_DUR", F_DUR);
    PyModule_AddIntConstant(m, "F_TID_NULL", F_TID_NULL);
    PyModule_AddIntConstant(m, "F_TID_ABSENT", F_TID_ABSENT);
    PyModule_AddIntConstant(m, "F_NAME", F_NAME);
    PyModule_AddIntConstant(m, "F_CAT", F_CAT);
    PyModule_AddIntConstant(m, "F_ARGS", F_ARGS);
    PyModule_AddIntConstant(m, "ARG_ID_ABSENT", ARG_ID_ABSENT);
    PyModule_AddIntConstant(m, "ARG_ID_NO_ARGS", ARG_ID_NO_ARGS);
    return m;
}
