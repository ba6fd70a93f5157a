/* srv_tools_int.h - what the tool formats' rows (srv_tools_fmt.c) tell the
 * parser that finds calls in an answer as it is generated
 * (srv_tools_stream.c). Internal to server/api's tool files.
 *
 * A format's answer is text, calls, or both, in one of two layouts:
 *   - blocks: each call between item_open and item_close, anywhere in the
 *     text (Hermes' <tool_call> blocks);
 *   - a list at the answer's start: one of list_open, then calls with sep
 *     between two of them, then list_close (Mistral's and the generic
 *     format's JSON lists); with no list_open the calls start at once and
 *     whitespace or ';' separates them (Llama 3's JSON objects).
 * Each call is a JSON object whose first member is "name" and which has
 * "arguments" (or Llama 3's "parameters"); other members are passed over.
 * In every pattern a space stands for any run of whitespace, or none; no
 * pattern ends with one. */
#ifndef SRV_TOOLS_INT_H
#define SRV_TOOLS_INT_H

#include "models/chat_template.h"

typedef struct srv_tools_markup {
    const char *item_open, *item_close; /* blocks: around each call; NULL: a list */
    const char *list_open[3];           /* a list: its openings, NULL-terminated */
    const char *sep;                    /* between two calls of a list; NULL: whitespace or ';' */
    const char *list_close;             /* after a list's last call; NULL: none */
    /* An answer of text inside a JSON string (the generic format's
     * {"response": "..."}): text_open ends just inside the string's opening
     * quote, text_close follows its closing quote; NULL: none. */
    const char *text_open, *text_close;
} srv_tools_markup;

/* The markup of family kind's format (static). */
const srv_tools_markup *srv_tools_markup_of(model_chat_kind kind);

#endif
