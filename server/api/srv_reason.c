/* srv_reason.c - the <think> splitter (srv_reason.h).
 *
 * States: START (before the first non-whitespace byte: hold has the leading
 * whitespace and the part of "<think>" matched so far), THINK (inside the
 * block: hold has the part of "</think>" matched so far), AFTER (past
 * "</think>": whitespace is dropped), CONTENT (everything passes through).
 * '<' occurs in both tags only as their first byte, so on a mismatch the held
 * bytes are decided and the current byte is looked at again from scratch. */
#include "server/api/srv_reason.h"

#include <string.h>

enum { R_START, R_THINK, R_AFTER, R_CONTENT };

static const char TAG_OPEN[] = "<think>";
static const char TAG_CLOSE[] = "</think>";
#define OPEN_LEN (sizeof TAG_OPEN - 1)
#define CLOSE_LEN (sizeof TAG_CLOSE - 1)
/* Leading whitespace held at most: past it the output is taken as an answer. */
#define MAX_LEADING_WS 64

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

void srv_reason_init(srv_reason *r) {
    memset(r, 0, sizeof *r);
    r->state = R_START;
}

void srv_reason_feed(srv_reason *r, const char *s, size_t n, int final, brisk_buf *reasoning,
                     brisk_buf *content) {
    size_t i = 0;
    while (i < n) {
        const char c = s[i];
        switch (r->state) {
        case R_START: {
            size_t ws = 0;
            while (ws < r->n_hold && is_ws(r->hold[ws]))
                ws++;
            const size_t matched = r->n_hold - ws;
            if (matched == 0 && is_ws(c) && ws < MAX_LEADING_WS) {
                r->hold[r->n_hold++] = c;
                i++;
            } else if (c == TAG_OPEN[matched]) {
                r->hold[r->n_hold++] = c;
                i++;
                if (matched + 1 == OPEN_LEN) { /* the block opens; its tag and the whitespace go */
                    r->n_hold = 0;
                    r->state = R_THINK;
                }
            } else { /* no block: all of it is the answer */
                brisk_buf_put(content, r->hold, r->n_hold);
                r->n_hold = 0;
                r->state = R_CONTENT;
            }
            break;
        }
        case R_THINK:
            if (c == TAG_CLOSE[r->n_hold]) {
                r->hold[r->n_hold++] = c;
                i++;
                if (r->n_hold == CLOSE_LEN) {
                    r->n_hold = 0;
                    r->state = R_AFTER;
                }
            } else if (r->n_hold) {
                brisk_buf_put(reasoning, r->hold, r->n_hold);
                r->n_hold = 0;
            } else {
                size_t j = i;
                while (j < n && s[j] != '<')
                    j++;
                brisk_buf_put(reasoning, s + i, j - i);
                i = j;
            }
            break;
        case R_AFTER:
            if (is_ws(c))
                i++;
            else
                r->state = R_CONTENT;
            break;
        default:
            brisk_buf_put(content, s + i, n - i);
            i = n;
            break;
        }
    }
    if (final && r->n_hold) {
        brisk_buf_put(r->state == R_THINK ? reasoning : content, r->hold, r->n_hold);
        r->n_hold = 0;
    }
}
