/* Text checks shared by every reader and writer of names and labels: UTF-8
 * validity (RFC 3629) and the one rule for tensor names (see io.h). */
#include "fp4/io.h"

#include <string.h>

_Static_assert(FP4_TENSOR_NAME_LEN == 128, "fp4_tensor_name_problem's message says 127 bytes");

/* Length of the UTF-8 sequence starting at s[0..n), or 0 when it is not a
 * well-formed one: overlong forms, surrogates (U+D800..U+DFFF) and code
 * points above U+10FFFF are refused, as RFC 3629 requires. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;      /* below: overlong */
        else if (c == 0xED) hi = 0x9F; /* above: surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;      /* below: overlong */
        else if (c == 0xF4) hi = 0x8F; /* above: beyond U+10FFFF */
    } else {
        return 0; /* a continuation byte, C0/C1 (overlong) or F5..FF */
    }
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

int fp4_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    if (!s) return len == 0;
    while (i < len) {
        size_t k = utf8_seq(p + i, len - i);
        if (k == 0) return 0;
        i += k;
    }
    return 1;
}

size_t fp4_utf8_sanitize(char *s, size_t len)
{
    unsigned char *p = (unsigned char *)s;
    size_t i = 0, bad = 0;
    while (s && i < len) {
        size_t k = utf8_seq(p + i, len - i);
        if (k == 0) {
            p[i] = '?'; /* one byte for one byte: lengths and buffers stay as they are */
            bad++;
            k = 1;
        }
        i += k;
    }
    return bad;
}

const char *fp4_tensor_name_problem(const char *name)
{
    size_t len;
    if (!name) return "is missing";
    len = strnlen(name, FP4_TENSOR_NAME_LEN);
    if (len == 0) return "is empty";
    if (len >= FP4_TENSOR_NAME_LEN) return "is longer than 127 bytes";
    if (!fp4_utf8_valid(name, len)) return "is not valid UTF-8";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        /* control characters would garble messages and tables; no real
         * checkpoint uses them */
        if (c < 0x20 || c == 0x7F) return "has a control character";
    }
    if (strcmp(name, "__metadata__") == 0) return "is reserved (__metadata__ is the header's metadata)";
    return NULL;
}
