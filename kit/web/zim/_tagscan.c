/* The noise cut's plan in C (issue 32): kit.web.zim.precut._plan with the same grammar, tables and
 * decisions, ~20x faster than the regex-driven Python, which stays as the reference (tests compare
 * the two) and the fallback when this module is not built. Written here because no library
 * replays libxml2's HTML tree-building rules over a byte range; the rules come from
 * kit.web.zim.precut through configure(), so one table serves both implementations.
 *
 * plan(html: bytes, budget: int) -> (list of (tag_end, interior_end, name), budget_left)
 *   budget: bytes the interior scans may read in all (they stop when it runs out).
 *   Each cut: the noise element's start tag ends at tag_end, its end tag starts at interior_end,
 *   name is its lower-case tag name (bytes). Reads only inside `html`; writes only its own stack
 *   (at most MAX_DEPTH names) and the returned list.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_DEPTH 100
#define TAG_NAME_MAX 16     /* table names are shorter: a longer name is in no table */
#define MAX_NAMES 128       /* distinct names over all tables */
#define MAX_TOKENS_LEN 64   /* noise class tokens */
#define MAX_TOKENS_N 64

enum { F_VOID = 1, F_REFUSED = 2, F_CUT = 4 };

typedef struct {
    char name[TAG_NAME_MAX + 1];
    Py_ssize_t len;
    int flags;
    int priority;
    uint64_t closes[MAX_NAMES / 64];   /* ids of the current elements this start tag closes */
} name_t;

static name_t names[MAX_NAMES];
static int n_names = 0, configured = 0, default_priority = 100;
/* names by hash of (length, first and last byte): chains through name_next, -1 ends */
static int buckets[256], name_next[MAX_NAMES];

static inline unsigned bucket_of(const char *low, Py_ssize_t len) {
    return ((unsigned)len * 31u + (unsigned char)low[0] * 7u + (unsigned char)low[len - 1]) & 255u;
}
static char tokens[MAX_TOKENS_N][MAX_TOKENS_LEN + 1];
static Py_ssize_t token_len[MAX_TOKENS_N];
static int n_tokens = 0;

static inline int is_ws(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f';
}
static inline int is_split_ws(unsigned char c) {   /* bytes.split() */
    return is_ws(c) || c == '\v';
}
static inline int is_alpha(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
static inline int is_digit(unsigned char c) {
    return c >= '0' && c <= '9';
}
static inline int is_alnum(unsigned char c) {
    return is_alpha(c) || is_digit(c);
}
static inline unsigned char lower(unsigned char c) {
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

/* The id of a name (any case) in the tables, or -1. */
static int name_id(const unsigned char *p, Py_ssize_t len) {
    char low[TAG_NAME_MAX];
    Py_ssize_t k;
    int i;
    if (len > TAG_NAME_MAX)
        return -1;
    if (len < 1)
        return -1;
    for (k = 0; k < len; k++)
        low[k] = (char)lower(p[k]);
    for (i = buckets[bucket_of(low, len)]; i >= 0; i = name_next[i])
        if (names[i].len == len && memcmp(names[i].name, low, (size_t)len) == 0)
            return i;
    return -1;
}

static int add_name(const char *p, Py_ssize_t len) {
    int id;
    Py_ssize_t k;
    if (len < 1 || len > TAG_NAME_MAX) {
        PyErr_SetString(PyExc_ValueError, "table name length");
        return -1;
    }
    id = name_id((const unsigned char *)p, len);
    if (id >= 0)
        return id;
    if (n_names >= MAX_NAMES) {
        PyErr_SetString(PyExc_ValueError, "too many names");
        return -1;
    }
    memset(&names[n_names], 0, sizeof(name_t));
    for (k = 0; k < len; k++)
        names[n_names].name[k] = (char)lower((unsigned char)p[k]);
    names[n_names].len = len;
    names[n_names].priority = default_priority;
    {
        unsigned b = bucket_of(names[n_names].name, len);
        name_next[n_names] = buckets[b];
        buckets[b] = n_names;
    }
    return n_names++;
}

typedef struct {
    int is_end;
    const unsigned char *name;
    Py_ssize_t len;
    unsigned char last;   /* '/' when the tag ends with "/>" outside a value, else 0 */
    Py_ssize_t end;       /* offset after '>' */
} token_t;

static inline int is_attr_start(unsigned char c) {
    return is_alpha(c) || c == '_' || c == ':';
}
static inline int is_attr_char(unsigned char c) {
    return is_alnum(c) || c == '_' || c == ':' || c == '-' || c == '.';
}
static inline int is_unquoted(unsigned char c) {
    return !is_ws(c) && c != '"' && c != '\'' && c != '=' && c != '<' && c != '>' && c != '`';
}

/* The value at s[q] (after "=" and whitespace): its end offset, or -1 when there is none of the
 * grammar (quoted, or unquoted without "'=<>` and whitespace, at least one byte). `slash`: '/'
 * allowed in unquoted values. */
static Py_ssize_t value_end(const unsigned char *s, Py_ssize_t n, Py_ssize_t q, int slash) {
    Py_ssize_t u = q;
    if (q < n && (s[q] == '"' || s[q] == '\'')) {
        const unsigned char *e = memchr(s + q + 1, s[q], (size_t)(n - q - 1));
        return e == NULL ? -1 : (e - s) + 1;
    }
    while (u < n && is_unquoted(s[u]) && (slash || s[u] != '/'))
        u++;
    return u == q ? -1 : u;
}

/* A tag of precut._TOKEN's first alternative at s[i] == '<': 1 and `t`, else 0. */
static int tokenize(const unsigned char *s, Py_ssize_t n, Py_ssize_t i, token_t *t) {
    Py_ssize_t j = i + 1, start;
    unsigned char c;
    t->is_end = 0;
    t->last = 0;
    if (j < n && s[j] == '/') {
        t->is_end = 1;
        j++;
    }
    if (j >= n || !is_alpha(s[j]))
        return 0;
    start = j;
    while (j < n && is_alnum(s[j]))
        j++;
    if (j >= n)
        return 0;
    c = s[j];
    if (!(is_ws(c) || c == '/' || c == '>'))
        return 0;
    t->name = s + start;
    t->len = j - start;
    for (;;) {
        Py_ssize_t w = j, q;
        while (j < n && is_ws(s[j]))
            j++;
        if (j >= n)
            return 0;
        if (s[j] == '>')
            break;
        if (s[j] == '/') {
            if (j + 1 < n && s[j + 1] == '>') {
                t->last = '/';
                j++;
                break;
            }
            return 0;
        }
        if (j == w || !is_attr_start(s[j]))
            return 0;   /* attributes are separated by whitespace and start with a name */
        while (j < n && is_attr_char(s[j]))
            j++;
        q = j;
        while (q < n && is_ws(s[q]))
            q++;
        if (q < n && s[q] == '=') {
            q++;
            while (q < n && is_ws(s[q]))
                q++;
            j = value_end(s, n, q, 1);
            if (j < 0)
                return 0;
        }
    }
    t->end = j + 1;
    return 1;
}

typedef struct {
    int id;                   /* -1: a name in no table */
    const unsigned char *raw;
    Py_ssize_t len;
} open_t;

static int same(const open_t *o, int id, const token_t *t) {
    Py_ssize_t k;
    if (o->id >= 0 || id >= 0)
        return o->id == id;
    if (o->len != t->len)
        return 0;
    for (k = 0; k < t->len; k++)
        if (lower(o->raw[k]) != lower(t->name[k]))
            return 0;
    return 1;
}

static inline int priority_of(int id) {
    return id >= 0 ? names[id].priority : default_priority;
}

/* The end of a style element's raw text at s[i:]: the offset of "</style" followed by
 * whitespace, '/' or '>' (any case), or -1. */
static Py_ssize_t style_end(const unsigned char *s, Py_ssize_t n, Py_ssize_t i) {
    static const char want[] = "</style";
    while (i + 8 <= n) {
        const unsigned char *p = memchr(s + i, '<', (size_t)(n - i));
        Py_ssize_t k;
        if (p == NULL)
            return -1;
        i = p - s;
        if (i + 8 > n)
            return -1;
        for (k = 1; k < 7; k++)
            if (lower(s[i + k]) != (unsigned char)want[k])
                break;
        if (k == 7 && (is_ws(s[i + 7]) || s[i + 7] == '/' || s[i + 7] == '>'))
            return i;
        i++;
    }
    return -1;
}

/* precut._interior_end: the offset of the end tag closing element `id0` (start tag ending at
 * pos), or -1; *budget: bytes still allowed for the page's scans, less each token's bytes and
 * the text before it, and each style element's raw text. */
static Py_ssize_t interior_end(const unsigned char *s, Py_ssize_t n, Py_ssize_t pos, int id0,
                               Py_ssize_t *budget) {
    open_t stack[MAX_DEPTH];
    int depth = 1;
    Py_ssize_t i = pos;
    stack[0].id = id0;
    stack[0].raw = NULL;
    stack[0].len = names[id0].len;
    for (;;) {
        const unsigned char *p = i < n ? memchr(s + i, '<', (size_t)(n - i)) : NULL;
        token_t t;
        int id, k, level, flags;
        Py_ssize_t at;
        if (p == NULL)
            return -1;
        at = p - s;
        if (!tokenize(s, n, at, &t)) {
            *budget -= at + 1 - i;
            return -1;
        }
        *budget -= t.end - i;
        if (*budget < 0)
            return -1;
        i = t.end;
        id = name_id(t.name, t.len);
        flags = id >= 0 ? names[id].flags : 0;
        if (flags & F_REFUSED)
            return -1;
        if (t.is_end) {
            if (same(&stack[depth - 1], id, &t)) {
                if (--depth == 0)
                    return at;
                continue;
            }
            level = priority_of(id);
            for (k = depth - 1; k >= 0; k--) {
                if (same(&stack[k], id, &t))
                    break;
                if (priority_of(stack[k].id) > level)
                    break;
            }
            if (k < 0)
                return -1;   /* libxml2 would look for it outside the element */
            if (same(&stack[k], id, &t)) {
                depth = k;
                if (depth == 0)
                    return at;
            }
            continue;
        }
        while (id >= 0 && stack[depth - 1].id >= 0
               && (names[id].closes[stack[depth - 1].id / 64] >> (stack[depth - 1].id % 64)) & 1) {
            if (depth == 1)
                return -1;   /* it would close the noise element itself */
            depth--;
        }
        if (flags & F_VOID)
            continue;
        if (t.last == '/')
            return -1;   /* "/>" closes it at once to libxml2, not to HTML5 */
        if (t.len == 5 && id >= 0 && memcmp(names[id].name, "style", 5) == 0) {
            token_t c;
            Py_ssize_t e = style_end(s, n, i);
            if (e < 0 || !tokenize(s, n, e, &c) || c.last == '/') {
                *budget -= n - i;   /* what a failed search may have read: no rescans per element */
                return -1;
            }
            *budget -= c.end - i;
            i = c.end;
            if (*budget < 0)
                return -1;
            continue;
        }
        if (depth >= MAX_DEPTH)
            return -1;
        stack[depth].id = id;
        stack[depth].raw = t.name;
        stack[depth].len = t.len;
        depth++;
    }
}

static int is_token(const unsigned char *p, Py_ssize_t len) {
    int k;
    for (k = 0; k < n_tokens; k++)
        if (token_len[k] == len && memcmp(tokens[k], p, (size_t)len) == 0)
            return 1;
    return 0;
}

/* Whether the ASCII-whitespace-separated words of s[a:b] include a noise class token. */
static int has_token(const unsigned char *s, Py_ssize_t a, Py_ssize_t b) {
    while (a < b) {
        Py_ssize_t w;
        while (a < b && is_split_ws(s[a]))
            a++;
        w = a;
        while (a < b && !is_split_ws(s[a]))
            a++;
        if (a > w && is_token(s + w, a - w))
            return 1;
    }
    return 0;
}

static const unsigned char *memfind(const unsigned char *s, Py_ssize_t n, Py_ssize_t from,
                                    const char *needle, Py_ssize_t nlen) {
    if (from > n)
        return NULL;
    return memmem(s + from, (size_t)(n - from), needle, (size_t)nlen);
}

/* precut._start_tag: the end of the start tag at s[i] == '<' and its name's id when it is of
 * the strict grammar, an element that can be cut, with unique attribute names, no '&' in its
 * class or id, and noise; else -1. */
static Py_ssize_t noise_start(const unsigned char *s, Py_ssize_t n, Py_ssize_t i, int *out_id) {
    Py_ssize_t j = i + 1, nstart, cls_a = -1, cls_b = -1, id_a = -1, id_b = -1;
    const unsigned char *attr_names[256];
    Py_ssize_t attr_lens[256];
    int n_attrs = 0, id, k, quoted;
    if (j >= n || !is_alpha(s[j]))
        return -1;
    nstart = j;
    while (j < n && is_alnum(s[j]))
        j++;
    id = name_id(s + nstart, j - nstart);
    if (id < 0 || !(names[id].flags & F_CUT))
        return -1;
    for (;;) {
        Py_ssize_t w = j, a_start, a_len, v_a, v_b;
        while (j < n && is_ws(s[j]))
            j++;
        if (j >= n)
            return -1;
        if (s[j] == '>')
            break;
        if (j == w)
            return -1;   /* attributes are separated by whitespace */
        if (!is_attr_start(s[j]))
            return -1;
        a_start = j;
        while (j < n && is_attr_char(s[j]))
            j++;
        a_len = j - a_start;
        v_a = v_b = -1;
        {
            Py_ssize_t q = j;
            while (q < n && is_ws(s[q]))
                q++;
            if (q < n && s[q] == '=') {
                Py_ssize_t e;
                q++;
                while (q < n && is_ws(s[q]))
                    q++;
                e = value_end(s, n, q, 0);
                if (e < 0)
                    return -1;   /* "=" without a value of the grammar */
                quoted = s[q] == '"' || s[q] == '\'';
                v_a = quoted ? q + 1 : q;
                v_b = quoted ? e - 1 : e;
                j = e;
            }
        }
        for (k = 0; k < n_attrs; k++) {
            Py_ssize_t c;
            if (attr_lens[k] != a_len)
                continue;
            for (c = 0; c < a_len; c++)
                if (lower(attr_names[k][c]) != lower(s[a_start + c]))
                    break;
            if (c == a_len)
                return -1;   /* a repeated attribute: libxml2 keeps the first (refused) */
        }
        if (n_attrs >= 256)
            return -1;
        attr_names[n_attrs] = s + a_start;
        attr_lens[n_attrs++] = a_len;
        if (a_len == 5 && lower(s[a_start]) == 'c' && lower(s[a_start + 1]) == 'l'
            && lower(s[a_start + 2]) == 'a' && lower(s[a_start + 3]) == 's'
            && lower(s[a_start + 4]) == 's') {
            cls_a = v_a < 0 ? j : v_a;
            cls_b = v_a < 0 ? j : v_b;
        } else if (a_len == 2 && lower(s[a_start]) == 'i' && lower(s[a_start + 1]) == 'd') {
            id_a = v_a < 0 ? j : v_a;
            id_b = v_a < 0 ? j : v_b;
        }
    }
    if (cls_a >= 0 && memchr(s + cls_a, '&', (size_t)(cls_b - cls_a)))
        return -1;
    if (id_a >= 0 && memchr(s + id_a, '&', (size_t)(id_b - id_a)))
        return -1;
    if (!((cls_a >= 0 && has_token(s, cls_a, cls_b))
          || (names[id].len == 3 && memcmp(names[id].name, "sup", 3) == 0 && id_a >= 0
              && id_b - id_a >= 8 && memcmp(s + id_a, "cite_ref", 8) == 0)))
        return -1;
    *out_id = id;
    return j + 1;
}

#define MAX_CLASS 4096   /* a longer class value is never a trigger */

static PyObject *plan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t budget, n, done = 0, last = -1, t = 0, prev_trig = 0, prev_lt = -1, quote = -1;
    const unsigned char *s, *next_cls, *next_cite;
    PyObject *cuts;
    (void)self;
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "_tagscan.configure() was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*n", &buf, &budget))
        return NULL;
    if (budget < -1)
        budget = -1;   /* no cut either way; no overflow when charged */
    s = (const unsigned char *)buf.buf;
    n = buf.len;
    cuts = PyList_New(0);
    if (cuts == NULL)
        goto fail;
    next_cls = memfind(s, n, 0, "class=\"", 7);
    next_cite = memfind(s, n, 0, "id=\"cite_ref", 12);
    for (;;) {
        const unsigned char *trig;
        int is_cls, id = -1;
        Py_ssize_t start, tag_end, end, at, k;
        /* the leftmost trigger, as re.finditer(b'class="|id="cite_ref') finds them */
        if (next_cls != NULL && next_cls - s < t)
            next_cls = memfind(s, n, t, "class=\"", 7);
        if (next_cite != NULL && next_cite - s < t)
            next_cite = memfind(s, n, t, "id=\"cite_ref", 12);
        if (next_cls == NULL && next_cite == NULL)
            break;
        is_cls = next_cite == NULL || (next_cls != NULL && next_cls < next_cite);
        trig = is_cls ? next_cls : next_cite;
        at = trig - s;
        t = at + (is_cls ? 7 : 12);
        /* the last '<' before the trigger: scanned back only to the previous trigger */
        for (k = at; k > prev_trig && s[k - 1] != '<'; k--)
            ;
        start = k > prev_trig ? k - 1 : prev_lt;
        prev_trig = at;
        prev_lt = start;
        if (is_cls) {
            if (quote < t) {
                const unsigned char *q = memchr(s + t, '"', (size_t)(n - t));
                quote = q == NULL ? n : q - s;
            }
            if (quote >= n || quote - t > MAX_CLASS || !has_token(s, t, quote))
                continue;
        }
        if (start < 0 || start < done || start == last)
            continue;
        last = start;
        tag_end = noise_start(s, n, start, &id);
        if (tag_end < 0)
            continue;
        end = interior_end(s, n, tag_end, id, &budget);
        if (end < 0) {
            if (budget < 0)
                break;
            continue;
        }
        {
            PyObject *item = Py_BuildValue("(nny#)", tag_end, end, names[id].name, names[id].len);
            if (item == NULL || PyList_Append(cuts, item) < 0) {
                Py_XDECREF(item);
                goto fail;
            }
            Py_DECREF(item);
        }
        done = end;
    }
    PyBuffer_Release(&buf);
    return Py_BuildValue("(Nn)", cuts, budget);
fail:
    Py_XDECREF(cuts);
    PyBuffer_Release(&buf);
    return NULL;
}

/* configure(voids, refused, priorities, default_priority, closes, cut_tags, noise_tokens) */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *v, *r, *p, *c, *cut, *tok, *seq = NULL;
    Py_ssize_t k, count, len;
    int dflt, id, id2, value;
    const char *a, *b;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOiOOO", &v, &r, &p, &dflt, &c, &cut, &tok))
        return NULL;
    n_names = 0;
    n_tokens = 0;
    memset(buckets, -1, sizeof(buckets));
    configured = 0;
    default_priority = dflt;
#define EACH(obj) \
    seq = PySequence_Fast(obj, "expected a sequence"); \
    if (seq == NULL) return NULL; \
    count = PySequence_Fast_GET_SIZE(seq); \
    for (k = 0; k < count; k++)
    EACH(v) {
        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(seq, k), (char **)&a, &len) < 0
            || (id = add_name(a, len)) < 0)
            goto fail;
        names[id].flags |= F_VOID;
    }
    Py_CLEAR(seq);
    EACH(r) {
        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(seq, k), (char **)&a, &len) < 0
            || (id = add_name(a, len)) < 0)
            goto fail;
        names[id].flags |= F_REFUSED;
    }
    Py_CLEAR(seq);
    EACH(cut) {
        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(seq, k), (char **)&a, &len) < 0
            || (id = add_name(a, len)) < 0)
            goto fail;
        names[id].flags |= F_CUT;
    }
    Py_CLEAR(seq);
    EACH(p) {
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "y#i", &a, &len, &value)
            || (id = add_name(a, len)) < 0)
            goto fail;
        names[id].priority = value;
    }
    Py_CLEAR(seq);
    EACH(c) {
        Py_ssize_t len2;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "y#y#", &a, &len, &b, &len2)
            || (id = add_name(a, len)) < 0 || (id2 = add_name(b, len2)) < 0)
            goto fail;
        names[id2].closes[id / 64] |= (uint64_t)1 << (id % 64);   /* new tag id2 closes id */
    }
    Py_CLEAR(seq);
    EACH(tok) {
        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(seq, k), (char **)&a, &len) < 0)
            goto fail;
        if (len < 1 || len > MAX_TOKENS_LEN || n_tokens >= MAX_TOKENS_N) {
            PyErr_SetString(PyExc_ValueError, "noise token");
            goto fail;
        }
        memcpy(tokens[n_tokens], a, (size_t)len);
        token_len[n_tokens++] = len;
    }
    Py_CLEAR(seq);
#undef EACH
    configured = 1;
    Py_RETURN_NONE;
fail:
    Py_XDECREF(seq);
    return NULL;
}

static PyMethodDef methods[] = {
    {"plan", plan, METH_VARARGS,
     "plan(html, budget) -> ([(tag_end, interior_end, name)], budget_left): precut._plan"},
    {"configure", configure, METH_VARARGS,
     "configure(voids, refused, priorities, default_priority, closes, cut_tags, noise_tokens)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tagscan", "The noise cut's plan in C (kit.web.zim.precut)", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__tagscan(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
