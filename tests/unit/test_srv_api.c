/* test_srv_api.c - request parsing of /v1/completions and /v1/chat/completions:
 * every validation rule as a table of bad bodies (status 400, the right
 * param), every accepted form of prompt, stop, logit_bias and content parts,
 * duplicate keys (nested, and 50k keys fast), the depth limit, NUL and invalid
 * UTF-8, and 20k random mutations of valid bodies that must either parse into
 * well-formed structs or give a 400. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "server/api/srv_api.h"

#define NV 100 /* vocabulary size of the limits under test */

static srv_api_limits L;

/* Bodies in the tables are written with ' for " to stay readable. */
static char *jq(const char *s) {
    char *b = strdup(s);
    for (char *p = b; *p; p++)
        if (*p == '\'')
            *p = '"';
    return b;
}

static int parse_c(const char *sq, srv_completion_req *r, srv_api_error *e) {
    char *b = jq(sq);
    int rc = srv_api_parse_completion(b, strlen(b), &L, r, e);
    free(b); /* the result must not point into the body */
    return rc;
}

static int parse_chat(const char *sq, srv_chat_req *r, srv_api_error *e) {
    char *b = jq(sq);
    int rc = srv_api_parse_chat(b, strlen(b), &L, r, e);
    free(b);
    return rc;
}

static int is_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

/* An error as the API promises it: 400, invalid_request_error, param as
 * expected, a one-line message; the output struct zeroed. */
static void check_400(int rc, const srv_api_error *e, const char *param, const void *out,
                      size_t out_size, const char *what) {
    CHECK(rc == BRISK_EINVAL, "%s: rc %d", what, rc);
    CHECK(e->status == 400, "%s: status %d", what, e->status);
    CHECK(e->type && !strcmp(e->type, "invalid_request_error"), "%s: type", what);
    CHECK(!strcmp(e->param, param), "%s: param '%s', want '%s' (%s)", what, e->param, param,
          e->message);
    CHECK(bt_one_line(e->message), "%s: message '%s'", what, e->message);
    CHECK(is_zero(out, out_size), "%s: output not zeroed", what);
}

typedef struct bad_case {
    const char *body;
    const char *param;
} bad_case;

/* A valid prompt, to isolate the field under test. */
#define P "{'prompt':'hi',"

static const bad_case bad_completions[] = {
    {"{'prompt':'a','min_tokens':-1}", "min_tokens"},
    {"{'prompt':'a','stop_token_ids':[512]}", "stop_token_ids"},
    {"{'prompt':'a','stop_token_ids':'1'}", "stop_token_ids"},
    {"{'prompt':'a','include_stop_str_in_output':'yes'}", "include_stop_str_in_output"},
    {"{'prompt':'a','n_predict':0}", "n_predict"},
    {"{'prompt':'a','n_predict':4,'max_tokens':5}", "n_predict"},
    {"{'prompt':'a','guided_regex':'(a'}", "guided_regex"},
    {"{'prompt':'a','mirostat':2}", "mirostat"},
    {"{'prompt':'a','grammar':5}", "grammar"},
    {"{'prompt':'a','guided_choice':[]}", "guided_choice"},
    {"{'prompt':'a','structured_outputs':{'regex':'a(?=b)'}}", "structured_outputs"},
    {"{'prompt':'a','grammar':'root ::= \\\"a\\\"','guided_choice':['a']}", "guided_choice"},
    /* not JSON, or not an object */
    {"", ""},
    {"  \n ", ""},
    {"{", ""},
    {"{'prompt':'a'", ""},
    {"[1]", ""},
    {"'prompt'", ""},
    {"null", ""},
    {"{'prompt':'a'} x", ""},
    {"{'prompt':'a'}{}", ""},
    {"{'prompt':'a',}", ""},
    {"{'prompt' 'a'}", ""},
    {"{prompt:'a'}", ""},
    {"{'prompt':'a', 'max_tokens':01}", ""},
    {"{'prompt':'a', 'max_tokens':1.}", ""},
    {"{'prompt':'a', 'max_tokens':+1}", ""},
    {"{'prompt':'a', 'max_tokens':.5}", ""},
    {"{'prompt':'a', 'max_tokens':1e}", ""},
    {"{'prompt':'a', 'max_tokens':-}", ""},
    {"{'prompt':'a', 'max_tokens':NaN}", ""},
    {"{'prompt':'a', 'max_tokens':Infinity}", ""},
    {"{'prompt':'a\\x'}", ""},
    {"{'prompt':'a\\u12'}", ""},
    {"{'prompt':'a\\u0000b'}", ""},
    {"{'prompt':'\\ud800'}", ""},
    {"{'prompt':'\\udc00x'}", ""},
    {"{'prompt':'\\ud800\\u0041'}", ""},
    {"{'prompt':'a','x':tru}", ""},
    /* numbers: type, finiteness, range */
    {P "'temperature':'hot'}", "temperature"},
    {P "'temperature':-0.1}", "temperature"},
    {P "'temperature':2.5}", "temperature"},
    {P "'temperature':1e999}", "temperature"},
    {P "'temperature':-1e999}", "temperature"},
    {P "'temperature':[1]}", "temperature"},
    {P "'top_p':0}", "top_p"},
    {P "'top_p':1e-50}", "top_p"}, /* 0.0f as a float (found by fuzz_json_completions) */
    {P "'top_p':1.5}", "top_p"},
    {P "'top_p':-1}", "top_p"},
    {P "'top_k':-2}", "top_k"},
    {P "'top_k':1.5}", "top_k"},
    {P "'top_k':1e30}", "top_k"},
    {P "'min_p':-0.1}", "min_p"},
    {P "'min_p':1.1}", "min_p"},
    {P "'max_tokens':0}", "max_tokens"},
    {P "'max_tokens':-5}", "max_tokens"},
    {P "'max_tokens':1.5}", "max_tokens"},
    {P "'max_tokens':1e30}", "max_tokens"},
    {P "'max_tokens':1e999}", "max_tokens"},
    {P "'max_tokens':'10'}", "max_tokens"},
    {P "'max_tokens':true}", "max_tokens"},
    {P "'max_tokens':2147483648}", "max_tokens"},
    {P "'n':0}", "n"},
    {P "'n':17}", "n"},
    {P "'n':2.5}", "n"},
    {P "'seed':1.5}", "seed"},
    {P "'seed':'1'}", "seed"},
    {P "'seed':1e20}", "seed"},
    {P "'seed':9223372036854775808}", "seed"},
    {P "'presence_penalty':2.5}", "presence_penalty"},
    {P "'presence_penalty':-3}", "presence_penalty"},
    {P "'frequency_penalty':3}", "frequency_penalty"},
    {P "'frequency_penalty':'x'}", "frequency_penalty"},
    {P "'repetition_penalty':0}", "repetition_penalty"},
    {P "'repetition_penalty':5e-324}", "repetition_penalty"}, /* 0.0f as a float */
    {P "'repetition_penalty':-1}", "repetition_penalty"},
    {P "'repetition_penalty':11}", "repetition_penalty"},
    /* stop */
    {P "'stop':['a','b','c','d','e']}", "stop"},
    {P "'stop':''}", "stop"},
    {P "'stop':['a','']}", "stop"},
    {P "'stop':[1]}", "stop"},
    {P "'stop':5}", "stop"},
    {P "'stop':{'a':1}}", "stop"},
    {P "'stop':[null]}", "stop"},
    /* logit_bias */
    {P "'logit_bias':[]}", "logit_bias"},
    {P "'logit_bias':'x'}", "logit_bias"},
    {P "'logit_bias':{'abc':1}}", "logit_bias"},
    {P "'logit_bias':{'-1':1}}", "logit_bias"},
    {P "'logit_bias':{'100':1}}", "logit_bias"},
    {P "'logit_bias':{'99999999999':1}}", "logit_bias"},
    {P "'logit_bias':{'01':1}}", "logit_bias"},
    {P "'logit_bias':{' 5':1}}", "logit_bias"},
    {P "'logit_bias':{'5 ':1}}", "logit_bias"},
    {P "'logit_bias':{'':1}}", "logit_bias"},
    {P "'logit_bias':{'5':101}}", "logit_bias"},
    {P "'logit_bias':{'5':-100.5}}", "logit_bias"},
    {P "'logit_bias':{'5':'x'}}", "logit_bias"},
    {P "'logit_bias':{'5':null}}", "logit_bias"},
    {P "'logit_bias':{'1':1,'2':1,'3':1,'4':1,'5':1,'6':1,'7':1,'8':1,'9':1}}", "logit_bias"},
    /* logprobs, flags, strings */
    {P "'logprobs':21}", "logprobs"},
    {P "'logprobs':-1}", "logprobs"},
    {P "'logprobs':true}", "logprobs"},
    {P "'logprobs':1.5}", "logprobs"},
    {P "'echo':'yes'}", "echo"},
    {P "'stream':1}", "stream"},
    {P "'stream_options':{'include_usage':true}}", "stream_options"},
    {P "'stream':false,'stream_options':{'include_usage':true}}", "stream_options"},
    {P "'stream':true,'stream_options':'x'}", "stream_options"},
    {P "'stream':true,'stream_options':{'include_usage':'x'}}", "stream_options.include_usage"},
    {P "'user':5}", "user"},
    {P "'ignore_eos':'no'}", "ignore_eos"},
    {P "'best_of':2}", "best_of"},
    {P "'best_of':1.5}", "best_of"},
    {P "'suffix':'x'}", "suffix"},
    {P "'suffix':5}", "suffix"},
    {P "'model':5}", "model"},
    /* prompt */
    {"{}", "prompt"},
    {"{'prompt':null}", "prompt"},
    {"{'prompt':5}", "prompt"},
    {"{'prompt':true}", "prompt"},
    {"{'prompt':{'a':1}}", "prompt"},
    {"{'prompt':''}", "prompt"},
    {"{'prompt':[]}", "prompt"},
    {"{'prompt':['']}", "prompt"},
    {"{'prompt':['a','']}", "prompt"},
    {"{'prompt':['a',1]}", "prompt"},
    {"{'prompt':[1,'a']}", "prompt"},
    {"{'prompt':[1,-1]}", "prompt"},
    {"{'prompt':[1,100]}", "prompt"},
    {"{'prompt':[1.5]}", "prompt"},
    {"{'prompt':[1e999]}", "prompt"},
    {"{'prompt':[[]]}", "prompt"},
    {"{'prompt':[[1],[]]}", "prompt"},
    {"{'prompt':[[1],['a']]}", "prompt"},
    {"{'prompt':[[1],[100]]}", "prompt"},
    {"{'prompt':[[1],2]}", "prompt"},
    {"{'prompt':[true]}", "prompt"},
    {"{'prompt':[null]}", "prompt"},
    {"{'prompt':[{'a':1}]}", "prompt"},
    /* duplicate keys */
    {"{'prompt':'a','prompt':'b'}", "prompt"},
    {"{'prompt':'a','max_tokens':1,'max_tokens':1}", "max_tokens"},
    {"{'prompt':'a','x':{'k':1,'k':2}}", ""},
    {"{'prompt':'a','x':[{'k':1},{'j':1,'k':2,'j':3}]}", ""},
    {"{'prompt':'a','logit_bias':{'5':1,'5':2}}", ""},
    {"{'prompt':'a','x':{'a':1,'b':1,'c':1,'d':1,'e':1,'f':1,'g':1,'h':1,'i':1,'j':1,'a':1}}", ""},
};

static const char *C = "'messages':[{'role':'user','content':'hi'}],";

static const bad_case bad_chats[] = {
    {"{}", "messages"},
    {"{'messages':null}", "messages"},
    {"{'messages':'x'}", "messages"},
    {"{'messages':{}}", "messages"},
    {"{'messages':[]}", "messages"},
    {"{'messages':[1]}", "messages[0]"},
    {"{'messages':[null]}", "messages[0]"},
    {"{'messages':[{}]}", "messages[0].role"},
    {"{'messages':[{'role':'tool','content':'x'}]}", "messages[0].tool_call_id"},
    {"{'messages':[{'role':'function','content':'x'}]}", "messages[0].role"},
    {"{'messages':[{'role':'bogus','content':'x'}]}", "messages[0].role"},
    {"{'messages':[{'role':'User','content':'x'}]}", "messages[0].role"},
    {"{'messages':[{'role':5,'content':'x'}]}", "messages[0].role"},
    {"{'messages':[{'role':'user'}]}", "messages[0].content"},
    {"{'messages':[{'role':'assistant','content':null}]}", "messages[0].content"},
    {"{'messages':[{'role':'user','content':5}]}", "messages[0].content"},
    {"{'messages':[{'role':'user','content':[]}]}", "messages[0].content"},
    {"{'messages':[{'role':'user','content':['a']}]}", "messages[0].content"},
    {"{'messages':[{'role':'user','content':'x'}],'chat_template_kwargs':5}",
     "chat_template_kwargs"},
    {"{'messages':[{'role':'user','content':'x'}],'chat_template_kwargs':{'enable_thinking':1}}",
     "chat_template_kwargs.enable_thinking"},
    {"{'messages':[{'role':'user','content':'x'}],'chat_template_kwargs':{'add_vision_id':true}}",
     "chat_template_kwargs"},
    {"{'messages':[{'role':'user','content':'x'}],'reasoning_format':'deepseek-legacy'}",
     "reasoning_format"},
    {"{'messages':[{'role':'user','content':'x'}],'reasoning_format':5}", "reasoning_format"},
    {"{'messages':[{'role':'user','content':'x'}],'include_reasoning':'yes'}", "include_reasoning"},
    {"{'messages':[{'role':'user','content':[{'type':'image_url','image_url':{'url':'x'}}]}]}",
     "messages[0].content"},
    {"{'messages':[{'role':'user','content':[{'type':'text'}]}]}", "messages[0].content"},
    {"{'messages':[{'role':'user','content':[{'type':'text','text':5}]}]}", "messages[0].content"},
    {"{'messages':[{'role':'user','content':[{'text':'a'}]}]}", "messages[0].content"},
    {"{'messages':[{'role':'user','content':'x','name':5}]}", "messages[0].name"},
    {"{'messages':[{'role':'user','content':'x'},{'content':'y'}]}", "messages[1].role"},
    {"{'messages':[{'role':'user','content':'x','role':'user'}]}", ""},
    {"{'messages':[{'role':'user','content':'x'}],'logprobs':5}", "logprobs"},
    {"{'messages':[{'role':'user','content':'x'}],'top_logprobs':3}", "top_logprobs"},
    {"{'messages':[{'role':'user','content':'x'}],'logprobs':false,'top_logprobs':2}",
     "top_logprobs"},
    {"{'messages':[{'role':'user','content':'x'}],'logprobs':true,'top_logprobs':21}",
     "top_logprobs"},
    {"{'messages':[{'role':'user','content':'x'}],'logprobs':true,'top_logprobs':-1}",
     "top_logprobs"},
    {"{'messages':[{'role':'user','content':'x'}],'max_completion_tokens':0}",
     "max_completion_tokens"},
    {"{'messages':[{'role':'user','content':'x'}],'max_completion_tokens':2.5}",
     "max_completion_tokens"},
    {"{'messages':[{'role':'user','content':'x'}],'tools':[{'type':'function'}]}", "tools[0]"},
    {"{'messages':[{'role':'user','content':'x'}],'typical_p':0.9}", "typical_p"},
    {"{'messages':[{'role':'user','content':'x'}],'tools':{}}", "tools"},
    {"{'messages':[{'role':'user','content':'x'}],'functions':[{}]}", "functions"},
    {"{'messages':[{'role':'user','content':'x'}],'response_format':{'type':'json_schema'}}",
     "response_format"},
    {"{'messages':[{'role':'user','content':'x'}],'response_format':'text'}", "response_format"},
    {"{'messages':[{'role':'user','content':'x'}],'temperature':3}", "temperature"},
    {"{'messages':[{'role':'user','content':'x'}],'stream_options':{}}", "stream_options"},
    /* refused by name: they change the output elsewhere, brisk lacks them */
    {"{'messages':[{'role':'user','content':'x'}],'guided_choice':[5]}", "guided_choice"},
    {"{'messages':[{'role':'user','content':'x'}],'tool_choice':'required'}", "tool_choice"},
    {"{'messages':[{'role':'user','content':'x'}],'add_generation_prompt':false}",
     "add_generation_prompt"},
    {"{'messages':[{'role':'user','content':'x'}],'echo':'x'}", "echo"},
    {"{'messages':[{'role':'user','content':'x'}],'min_tokens':9,'max_tokens':8}", "min_tokens"},
};

/* Their neutral values pass (and stay unknown fields). */
static const char *const neutral_chats[] = {
    "{'messages':[{'role':'user','content':'x'}],'tool_choice':'none','typical_p':1,"
    "'mirostat':0,'dry_multiplier':0.0,'bad_words':[],'grammar':'','add_generation_prompt':true,"
    "'continue_final_message':false,'skip_special_tokens':true,'top_n_sigma':-1,"
    "'guided_json':null,'penalize_nl':false,'echo':false,'add_special_tokens':false}",
};

static void test_bad_tables(void) {
    for (size_t i = 0; i < sizeof bad_completions / sizeof *bad_completions; i++) {
        srv_completion_req r;
        srv_api_error e;
        int rc = parse_c(bad_completions[i].body, &r, &e);
        check_400(rc, &e, bad_completions[i].param, &r, sizeof r, bad_completions[i].body);
        srv_completion_req_free(&r);
    }
    for (size_t i = 0; i < sizeof bad_chats / sizeof *bad_chats; i++) {
        srv_chat_req r;
        srv_api_error e;
        int rc = parse_chat(bad_chats[i].body, &r, &e);
        check_400(rc, &e, bad_chats[i].param, &r, sizeof r, bad_chats[i].body);
        srv_chat_req_free(&r);
    }
    /* Chat-only fields in a completion are unknown, not errors (and back). */
    srv_completion_req r;
    srv_api_error e;
    CHECK(parse_c("{'prompt':'a','messages':5,'top_logprobs':'x','tools':[1]}", &r, &e) == 0, "%s",
          e.message);
    CHECK(r.params.n_unknown_fields == 3, "unknown %d", r.params.n_unknown_fields);
    srv_completion_req_free(&r);
    srv_chat_req c;
    char body[256];
    snprintf(body, sizeof body, "{%s'prompt':5,'echo':false,'suffix':1,'best_of':9}", C);
    CHECK(parse_chat(body, &c, &e) == 0, "%s", e.message);
    CHECK(c.params.n_unknown_fields == 4, "unknown %d", c.params.n_unknown_fields);
    srv_chat_req_free(&c);
    for (size_t i = 0; i < sizeof neutral_chats / sizeof *neutral_chats; i++) {
        CHECK(parse_chat(neutral_chats[i], &c, &e) == 0, "neutral: %s", e.message);
        CHECK(c.params.n_unknown_fields == 11, "unknown %d", c.params.n_unknown_fields);
        srv_chat_req_free(&c);
    }
    /* vLLM's stop fields and llama.cpp's n_predict. */
    CHECK(parse_c("{'prompt':'a','min_tokens':3,'stop_token_ids':[5,0],"
                  "'include_stop_str_in_output':true,'n_predict':9}",
                  &r, &e) == 0,
          "%s", e.message);
    CHECK(r.params.min_tokens == 3 && r.params.n_stop_token_ids == 2 &&
              r.params.stop_token_ids[0] == 5 && r.params.stop_token_ids[1] == 0 &&
              r.params.include_stop_str && r.params.max_tokens == 9 &&
              r.params.n_unknown_fields == 0,
          "stop fields");
    srv_completion_req_free(&r);
    CHECK(parse_c("{'prompt':'a','n_predict':-1,'stop_token_ids':[]}", &r, &e) == 0 &&
              r.params.max_tokens == -1 && r.params.n_stop_token_ids == 0,
          "n_predict -1: not given");
    srv_completion_req_free(&r);
}

/* Limits that are the app's: max_prompts, max_messages, max_stop_len. */
static void test_limits(void) {
    srv_api_limits saved = L;
    srv_api_error e;
    srv_completion_req r;
    L.max_prompts = 3;
    CHECK(parse_c("{'prompt':['a','b','c']}", &r, &e) == 0, "%s", e.message);
    srv_completion_req_free(&r);
    check_400(parse_c("{'prompt':['a','b','c','d']}", &r, &e), &e, "prompt", &r, sizeof r,
              "max_prompts");
    check_400(parse_c("{'prompt':[[1],[2],[3],[4]]}", &r, &e), &e, "prompt", &r, sizeof r,
              "max_prompts ids");
    L = saved;
    L.max_stop_len = 4;
    CHECK(parse_c("{'prompt':'a','stop':'abcd'}", &r, &e) == 0, "%s", e.message);
    srv_completion_req_free(&r);
    check_400(parse_c("{'prompt':'a','stop':'abcde'}", &r, &e), &e, "stop", &r, sizeof r,
              "max_stop_len");
    L = saved;
    L.max_messages = 2;
    srv_chat_req c;
    CHECK(parse_chat("{'messages':[{'role':'user','content':'a'},{'role':'user','content':'b'}]}",
                     &c, &e) == 0,
          "%s", e.message);
    srv_chat_req_free(&c);
    check_400(parse_chat("{'messages':[{'role':'user','content':'a'},{'role':'user','content':'b'}"
                         ",{'role':'user','content':'c'}]}",
                         &c, &e),
              &e, "messages", &c, sizeof c, "max_messages");
    L = saved;
    L.max_logit_bias = 2;
    CHECK(parse_c("{'prompt':'a','logit_bias':{'1':1,'2':-1}}", &r, &e) == 0, "%s", e.message);
    srv_completion_req_free(&r);
    check_400(parse_c("{'prompt':'a','logit_bias':{'1':1,'2':-1,'3':0}}", &r, &e), &e, "logit_bias",
              &r, sizeof r, "max_logit_bias");
    /* Values (keys, strings, numbers, literals, objects, arrays) are counted
     * before parsing: the first body has 9, each of the others 2 more. */
    L = saved;
    L.max_json_values = 9;
    CHECK(parse_c("{'prompt':[1,2],'echo':true,'n':1}", &r, &e) == 0, "%s", e.message);
    srv_completion_req_free(&r);
    check_400(parse_c("{'prompt':[1,2],'echo':true,'n':1,'x':7}", &r, &e), &e, "", &r, sizeof r,
              "max_json_values");
    check_400(parse_c("{'prompt':[1,2],'echo':true,'x':[null,false]}", &r, &e), &e, "", &r,
              sizeof r, "max_json_values literals");
    L = saved;
}

static void test_good_completion(void) {
    srv_completion_req r;
    srv_api_error e;

    /* Defaults. */
    CHECK(parse_c(" {'prompt':'Hello'} \n", &r, &e) == 0, "%s", e.message);
    const srv_gen_params *p = &r.params;
    CHECK(r.n_prompts == 1 && !r.prompts[0].is_tokens && r.prompts[0].text_len == 5 &&
              !strcmp(r.prompts[0].text, "Hello"),
          "string prompt");
    CHECK(p->model == NULL && p->max_tokens == -1 && p->temperature == 1.0f && p->top_p == 1.0f &&
              p->top_k == -1 && p->min_p == 0.0f && p->n == 1 && p->n_stop == 0 && !p->has_seed &&
              p->presence_penalty == 0 && p->frequency_penalty == 0 &&
              p->repetition_penalty == 1.0f && p->n_logit_bias == 0 && p->logprobs == -1 &&
              !p->echo && !p->stream && !p->include_usage && !p->ignore_eos &&
              p->n_unknown_fields == 0,
          "defaults");
    srv_completion_req_free(&r);

    /* Every field set; null is "not given". */
    CHECK(parse_c("{'model':'m1','prompt':'x','max_tokens':2.0,'temperature':0,'top_p':0.5,"
                  "'top_k':40,'min_p':0.05,'n':3,'best_of':3,'stop':['\\n','END'],'seed':-1,"
                  "'presence_penalty':-2,'frequency_penalty':2,'repetition_penalty':1.1,"
                  "'logit_bias':{'0':-100,'99':100,'7':0.5},'logprobs':5,'echo':true,"
                  "'stream':true,'stream_options':{'include_usage':true,'other':1},"
                  "'user':'u','ignore_eos':true,'suffix':'','Temperature':9,'extra':{'a':[1]}}",
                  &r, &e) == 0,
          "%s", e.message);
    CHECK(p->model && !strcmp(p->model, "m1"), "model");
    CHECK(p->max_tokens == 2 && p->temperature == 0.0f && p->top_p == 0.5f && p->top_k == 40 &&
              fabsf(p->min_p - 0.05f) < 1e-7f && p->n == 3,
          "numbers");
    CHECK(p->n_stop == 2 && !strcmp(p->stop[0], "\n") && !strcmp(p->stop[1], "END"), "stop");
    CHECK(p->has_seed && p->seed == UINT64_MAX, "seed -1 -> %llu", (unsigned long long)p->seed);
    CHECK(p->presence_penalty == -2.0f && p->frequency_penalty == 2.0f &&
              fabsf(p->repetition_penalty - 1.1f) < 1e-6f,
          "penalties");
    CHECK(p->n_logit_bias == 3 && p->logit_bias_ids[0] == 0 && p->logit_bias[0] == -100.0f &&
              p->logit_bias_ids[1] == 99 && p->logit_bias[1] == 100.0f &&
              p->logit_bias_ids[2] == 7 && p->logit_bias[2] == 0.5f,
          "logit_bias");
    CHECK(p->logprobs == 5 && p->echo && p->stream && p->include_usage && p->ignore_eos, "flags");
    CHECK(p->n_unknown_fields == 2, "unknown %d (field names are case-sensitive)",
          p->n_unknown_fields);
    srv_completion_req_free(&r);

    CHECK(parse_c("{'prompt':'x','model':null,'max_tokens':null,'temperature':null,'stop':null,"
                  "'seed':null,'logit_bias':null,'logprobs':null,'stream':null,"
                  "'stream_options':null,'user':null,'best_of':null,'suffix':null}",
                  &r, &e) == 0,
          "%s", e.message);
    CHECK(p->model == NULL && p->max_tokens == -1 && p->temperature == 1.0f && !p->has_seed &&
              p->logprobs == -1 && p->n_unknown_fields == 0,
          "nulls are defaults");
    srv_completion_req_free(&r);

    /* Small forms: a single stop string, top_k 0 = off, logprobs 0, big seed, stream_options
     * with stream. */
    CHECK(parse_c("{'prompt':'x','stop':'###','top_k':0,'logprobs':0,'seed':9007199254740992,"
                  "'stream':true,'stream_options':{}}",
                  &r, &e) == 0,
          "%s", e.message);
    CHECK(p->n_stop == 1 && !strcmp(p->stop[0], "###"), "stop string");
    CHECK(p->top_k == -1 && p->logprobs == 0 && p->seed == 9007199254740992ull && !p->include_usage,
          "top_k 0, logprobs 0, seed");
    srv_completion_req_free(&r);
    CHECK(parse_c("{'prompt':'x','stop':[],'logit_bias':{},'seed':-9223372036854775808}", &r, &e) ==
              0,
          "%s", e.message);
    CHECK(p->n_stop == 0 && p->n_logit_bias == 0 && p->seed == 0x8000000000000000ull,
          "empty stop, logit_bias; int64 min seed");
    srv_completion_req_free(&r);

    /* Prompt forms. */
    CHECK(parse_c("{'prompt':['a','bc','\\u00e9\\ud83d\\ude00']}", &r, &e) == 0, "%s", e.message);
    CHECK(r.n_prompts == 3 && !strcmp(r.prompts[1].text, "bc") && r.prompts[2].text_len == 6 &&
              !memcmp(r.prompts[2].text, "\xc3\xa9\xf0\x9f\x98\x80", 6),
          "array of strings, escapes decoded to UTF-8");
    srv_completion_req_free(&r);
    CHECK(parse_c("{'prompt':[0,5,99,5.0]}", &r, &e) == 0, "%s", e.message);
    CHECK(r.n_prompts == 1 && r.prompts[0].is_tokens && r.prompts[0].n_ids == 4 &&
              r.prompts[0].ids[0] == 0 && r.prompts[0].ids[1] == 5 && r.prompts[0].ids[2] == 99 &&
              r.prompts[0].ids[3] == 5 && r.prompts[0].text == NULL,
          "token ids");
    srv_completion_req_free(&r);
    CHECK(parse_c("{'prompt':[[1,2],[3],[4,5,6]]}", &r, &e) == 0, "%s", e.message);
    CHECK(r.n_prompts == 3 && r.prompts[0].n_ids == 2 && r.prompts[1].n_ids == 1 &&
              r.prompts[2].n_ids == 3 && r.prompts[2].ids[2] == 6 && r.prompts[1].is_tokens,
          "token-id arrays");
    srv_completion_req_free(&r);
}

static void test_good_chat(void) {
    srv_chat_req r;
    srv_api_error e;
    CHECK(parse_chat("{'model':'m','messages':[{'role':'developer','content':'be brief'},"
                     "{'role':'system','content':''},"
                     "{'role':'user','name':'bob','content':[{'type':'text','text':'Hel'},"
                     "{'type':'text','text':'lo','extra':1}]},"
                     "{'role':'assistant','content':'Hi!'}],"
                     "'max_tokens':5,'max_completion_tokens':7,'logprobs':true,'top_logprobs':3,"
                     "'stream':true,'stream_options':{'include_usage':true},'tools':[],"
                     "'response_format':{'type':'text'},'tool_choice':'none'}",
                     &r, &e) == 0,
          "%s", e.message);
    CHECK(r.n_msgs == 4, "n_msgs %d", r.n_msgs);
    if (r.n_msgs == 4) {
        CHECK(!strcmp(r.msgs[0].role, "system") && !strcmp(r.msgs[0].content, "be brief"),
              "developer -> system");
        CHECK(!strcmp(r.msgs[1].role, "system") && r.msgs[1].content_len == 0 &&
                  r.msgs[1].content[0] == '\0',
              "empty content");
        CHECK(!strcmp(r.msgs[2].role, "user") && r.msgs[2].content_len == 5 &&
                  !strcmp(r.msgs[2].content, "Hello"),
              "parts concatenated: '%s'", r.msgs[2].content);
        CHECK(!strcmp(r.msgs[3].role, "assistant") && !strcmp(r.msgs[3].content, "Hi!"),
              "assistant");
    }
    CHECK(r.params.max_tokens == 7, "max_completion_tokens wins: %d", r.params.max_tokens);
    CHECK(r.params.logprobs == 3 && r.params.stream && r.params.include_usage, "logprobs, stream");
    CHECK(r.params.n_unknown_fields == 0 && r.tool_choice == SRV_TOOL_CHOICE_NONE,
          "tool_choice known: %d", r.params.n_unknown_fields);
    srv_chat_req_free(&r);

    CHECK(parse_chat("{'messages':[{'role':'user','content':'x'}],'logprobs':true}", &r, &e) == 0,
          "%s", e.message);
    CHECK(r.params.logprobs == 0, "logprobs alone -> 0 alternatives");
    srv_chat_req_free(&r);
    CHECK(parse_chat("{'messages':[{'role':'user','content':'x'}],'logprobs':false,"
                     "'top_logprobs':null,'max_tokens':9}",
                     &r, &e) == 0,
          "%s", e.message);
    CHECK(r.params.logprobs == -1 && r.params.max_tokens == 9, "logprobs false; max_tokens");
    CHECK(r.enable_thinking == -1 && r.split_reasoning == 1 && r.include_reasoning == 1,
          "reasoning defaults");
    srv_chat_req_free(&r);
    CHECK(parse_chat("{'messages':[{'role':'user','content':'x'}],"
                     "'chat_template_kwargs':{'enable_thinking':false},'reasoning_format':'none',"
                     "'include_reasoning':false}",
                     &r, &e) == 0,
          "%s", e.message);
    CHECK(r.enable_thinking == 0 && r.split_reasoning == 0 && r.include_reasoning == 0,
          "reasoning fields: %d %d %d", r.enable_thinking, r.split_reasoning, r.include_reasoning);
    CHECK(r.params.n_unknown_fields == 0, "reasoning fields known");
    srv_chat_req_free(&r);
    CHECK(parse_chat("{'messages':[{'role':'user','content':'x'}],"
                     "'chat_template_kwargs':{'enable_thinking':null},'reasoning_format':'auto'}",
                     &r, &e) == 0,
          "%s", e.message);
    CHECK(r.enable_thinking == -1 && r.split_reasoning == 1, "null enable_thinking; auto");
    srv_chat_req_free(&r);
}

/* Bodies given with explicit lengths: raw NUL, ill-formed UTF-8. */
static void test_raw_bytes(void) {
    static const struct {
        const char *b;
        size_t len;
    } bad[] = {
        {"{\"prompt\":\"a\0b\"}", 16},
        {"{\"prompt\":\"a\"}\0", 15},
        {"{\"prompt\":\"a\xff\"}", 15},
        {"{\"prompt\":\"\xc0\x80\"}", 15},         /* overlong NUL */
        {"{\"prompt\":\"\xe0\x80\xaf\"}", 16},     /* overlong */
        {"{\"prompt\":\"\xed\xa0\x80\"}", 16},     /* surrogate */
        {"{\"prompt\":\"\xf4\x90\x80\x80\"}", 17}, /* above U+10FFFF */
        {"{\"prompt\":\"\xe2\x82\"}", 15},         /* truncated */
        {"{\"prompt\":\"\x80\"}", 14},             /* lone continuation */
        {"{\"pr\xffompt\":\"a\"}", 15},            /* in a key */
        {"{\"prompt\":\"a\",\"\xc3\":1}", 19},     /* in an unknown key */
        {"{\"prompt\":\"a\x01\"}", 15},            /* raw control character */
        {"{\"prompt\":\"a\n\"}", 15},
        {"\xef\xbb\xbf{\"prompt\":\"a\"}", 17}, /* BOM */
        {"{\"prompt\":\"a\"} \xc3\xa9", 17},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        srv_completion_req r;
        srv_api_error e;
        int rc = srv_api_parse_completion(bad[i].b, bad[i].len, &L, &r, &e);
        char what[32];
        snprintf(what, sizeof what, "raw case %zu", i);
        check_400(rc, &e, "", &r, sizeof r, what);
    }
    /* Well-formed multi-byte text passes, including U+10FFFF and U+FFFF. */
    const char ok[] = "{\"prompt\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf"
                      "\xef\xbf\xbf\"}";
    srv_completion_req r;
    srv_api_error e;
    CHECK(srv_api_parse_completion(ok, sizeof ok - 1, &L, &r, &e) == 0, "%s", e.message);
    CHECK(r.n_prompts == 1 && r.prompts[0].text_len == 16, "multibyte prompt");
    srv_completion_req_free(&r);
    /* The body need not be NUL-terminated: parse a prefix of a longer buffer. */
    const char longer[] = "{\"prompt\":\"abc\"}GARBAGE";
    CHECK(srv_api_parse_completion(longer, 16, &L, &r, &e) == 0, "%s", e.message);
    srv_completion_req_free(&r);
}

static void test_depth(void) {
    /* Root object + 31 arrays = depth 32: accepted; one more: rejected. */
    char b[512];
    for (int extra = 0; extra <= 1; extra++) {
        int n = 31 + extra, k = 0;
        k += snprintf(b + k, sizeof b - (size_t)k, "{\"prompt\":\"a\",\"x\":");
        for (int i = 0; i < n; i++)
            b[k++] = '[';
        for (int i = 0; i < n; i++)
            b[k++] = ']';
        k += snprintf(b + k, sizeof b - (size_t)k, "}");
        srv_completion_req r;
        srv_api_error e;
        int rc = srv_api_parse_completion(b, (size_t)k, &L, &r, &e);
        if (extra)
            check_400(rc, &e, "", &r, sizeof r, "depth 33");
        else
            CHECK(rc == 0, "depth 32: %s", e.message);
        srv_completion_req_free(&r);
    }
    /* A million open brackets: rejected at once, no recursion. */
    size_t n = 1000000;
    char *deep = malloc(n);
    memset(deep, '[', n);
    deep[0] = '{';
    srv_completion_req r;
    srv_api_error e;
    double t = brisk_now();
    check_400(srv_api_parse_completion(deep, n, &L, &r, &e), &e, "", &r, sizeof r, "deep");
    CHECK(brisk_now() - t < 1.0, "deep body took %.3f s", brisk_now() - t);
    /* Brackets inside strings do not count. */
    free(deep);
    char s[300];
    memset(s, 0, sizeof s);
    strcpy(s, "{\"prompt\":\"");
    memset(s + strlen(s), '[', 100);
    strcat(s, "\"}");
    CHECK(srv_api_parse_completion(s, strlen(s), &L, &r, &e) == 0, "brackets in a string: %s",
          e.message);
    CHECK(r.n_prompts == 1 && r.prompts[0].text_len == 100, "bracket prompt");
    srv_completion_req_free(&r);
}

/* {"prompt":"a","x":{k0..k(n-1)}} with keys written by the caller's rule. */
static char *many_keys(int n, int dup_last, int top_level, size_t *len) {
    size_t cap = (size_t)n * 24 + 64, k = 0;
    char *b = malloc(cap);
    k += (size_t)snprintf(b + k, cap - k,
                          top_level ? "{\"prompt\":\"a\"" : "{\"prompt\":\"a\",\"x\":{\"y\":0");
    for (int i = 0; i < n; i++) {
        int key = (dup_last && i == n - 1) ? n / 2 : i;
        k += (size_t)snprintf(b + k, cap - k, ",\"k%d\":%d", key, i);
    }
    k += (size_t)snprintf(b + k, cap - k, top_level ? "}" : "}}");
    *len = k;
    return b;
}

static void test_many_keys(void) {
    srv_completion_req r;
    srv_api_error e;
    size_t len;
    char *b = many_keys(50000, 0, 1, &len);
    double t = brisk_now();
    int rc = srv_api_parse_completion(b, len, &L, &r, &e);
    double dt = brisk_now() - t;
    CHECK(rc == 0 && r.params.n_unknown_fields == 50000, "50k keys: rc %d, unknown %d", rc,
          r.params.n_unknown_fields);
    CHECK(dt < 2.0, "50k keys took %.3f s", dt); /* ~20 ms in Release; generous for ASan */
    printf("50k top-level keys: %.1f ms\n", dt * 1e3);
    srv_completion_req_free(&r);
    free(b);

    b = many_keys(50000, 1, 1, &len);
    t = brisk_now();
    rc = srv_api_parse_completion(b, len, &L, &r, &e);
    dt = brisk_now() - t;
    check_400(rc, &e, "k25000", &r, sizeof r, "50k keys, one repeated");
    CHECK(dt < 2.0, "50k keys with a duplicate took %.3f s", dt);
    free(b);

    b = many_keys(100000, 1, 0, &len);
    t = brisk_now();
    rc = srv_api_parse_completion(b, len, &L, &r, &e);
    dt = brisk_now() - t;
    check_400(rc, &e, "", &r, sizeof r, "100k nested keys, one repeated");
    CHECK(dt < 4.0, "100k nested keys took %.3f s", dt);
    printf("100k nested keys with a duplicate: %.1f ms\n", dt * 1e3);
    free(b);
}

/* The error body: OpenAI's shape, param null when empty. */
static void test_error_json(void) {
    srv_completion_req r;
    srv_api_error e;
    parse_c("{'prompt':'a','temperature':'hot'}", &r, &e);
    char *j = srv_api_error_json(&e);
    cJSON *o = cJSON_Parse(j);
    const cJSON *er = cJSON_GetObjectItemCaseSensitive(o, "error");
    CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(er, "message")), "message");
    CHECK(
        !strcmp(cJSON_GetObjectItemCaseSensitive(er, "type")->valuestring, "invalid_request_error"),
        "type");
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(er, "param")->valuestring, "temperature"),
          "param");
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(er, "code")->valuestring, "invalid_type"),
          "code");
    CHECK(!strchr(j, '\n'), "one line");
    cJSON_Delete(o);
    free(j);
    parse_c("{", &r, &e);
    j = srv_api_error_json(&e);
    o = cJSON_Parse(j);
    er = cJSON_GetObjectItemCaseSensitive(o, "error");
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(er, "param")) &&
              cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(er, "code")),
          "param, code null: %s", j);
    cJSON_Delete(o);
    free(j);
}

/* ---------------------------------------------------------------- fuzz */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Independent of the code under test: a well-formed-UTF-8 check written
 * from the code point ranges. */
static int strict_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t c = s[i], cp;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 2, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 3, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 4, cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k;
    }
    return 1;
}

static int text_ok(const char *s, size_t n) {
    return strlen(s) == n && strict_utf8((const unsigned char *)s, n);
}

static int params_ok(const srv_gen_params *p) {
    int ok = p->temperature >= 0 && p->temperature <= 2 && p->top_p > 0 && p->top_p <= 1 &&
             (p->top_k == -1 || p->top_k >= 1) && p->min_p >= 0 && p->min_p <= 1 && p->n >= 1 &&
             p->n <= L.max_n && p->n_stop <= L.max_stop && p->logprobs >= -1 &&
             p->logprobs <= L.max_logprobs && p->repetition_penalty > 0 &&
             fabsf(p->presence_penalty) <= 2 && fabsf(p->frequency_penalty) <= 2 &&
             (p->max_tokens == -1 || p->max_tokens >= 1) && p->n_logit_bias <= L.max_logit_bias &&
             (!p->include_usage || p->stream);
    for (int i = 0; ok && i < p->n_stop; i++)
        ok = p->stop[i][0] && text_ok(p->stop[i], strlen(p->stop[i]));
    for (int i = 0; ok && i < p->n_logit_bias; i++)
        ok = p->logit_bias_ids[i] >= 0 && p->logit_bias_ids[i] < NV &&
             fabsf(p->logit_bias[i]) <= 100;
    if (ok && p->model)
        ok = text_ok(p->model, strlen(p->model));
    return ok;
}

static const char *seeds[] = {
    "{\"prompt\":\"Hello \\u00e9 world\",\"max_tokens\":16,\"temperature\":0.7,\"top_p\":0.9,"
    "\"stop\":[\"\\n\",\"END\"],\"logit_bias\":{\"5\":-1,\"6\":2},\"seed\":42,\"stream\":true,"
    "\"stream_options\":{\"include_usage\":true},\"logprobs\":3,\"echo\":false}",
    "{\"prompt\":[[1,2,3],[4,5]],\"n\":2,\"top_k\":5,\"min_p\":0.1,\"user\":\"u\","
    "\"extra\":{\"a\":[1,2,{\"b\":null}]}}",
    "{\"prompt\":[\"a\",\"bb\",\"c\xc3\xa9\"],\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,"
    "\"repetition_penalty\":1.2,\"ignore_eos\":true,\"model\":\"m\"}",
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"You are \\\"nice\\\"\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"},{\"type\":\"text\","
    "\"text\":\"\xe2\x82\xac\"}]},{\"role\":\"assistant\",\"content\":\"yo\"}],\"logprobs\":true,"
    "\"top_logprobs\":2,\"max_completion_tokens\":8,\"stop\":\"x\"}",
    "{\"messages\":[{\"role\":\"developer\",\"content\":\"d\",\"name\":\"n\"}],\"stream\":false,"
    "\"temperature\":0,\"seed\":-7,\"tools\":[],\"response_format\":{\"type\":\"text\"}}",
};

static const char *tokens[] = {"{",
                               "}",
                               "[",
                               "]",
                               ",",
                               ":",
                               "\"",
                               "\\",
                               "\\u0000",
                               "\\ud800",
                               "null",
                               "true",
                               "1e999",
                               "-0",
                               "0.5",
                               "\xff",
                               "\xc3",
                               "\xe2\x82",
                               "\"prompt\"",
                               "\"messages\"",
                               "\"stream\"",
                               "\"n\"",
                               "\"stop\"",
                               "\"stream_options\"",
                               "\"logprobs\"",
                               "\"role\"",
                               "\"content\"",
                               "1e30",
                               "99",
                               "100",
                               "-1",
                               "\"\"",
                               "\x00"};

/* One random edit of b[0..*len) in place (cap bytes available). */
static void mutate(char *b, size_t *len, size_t cap) {
    size_t n = *len, pos = n ? rnd() % n : 0;
    switch (rnd() % 6) {
    case 0: /* flip a byte */
        if (n)
            b[pos] = (char)rnd();
        break;
    case 1: /* delete a span */
        if (n) {
            size_t k = 1 + rnd() % 8;
            if (pos + k > n)
                k = n - pos;
            memmove(b + pos, b + pos + k, n - pos - k);
            *len = n - k;
        }
        break;
    case 2: { /* insert a JSON-ish token */
        const char *t = tokens[rnd() % (sizeof tokens / sizeof *tokens)];
        size_t k = strlen(t) ? strlen(t) : 1;
        if (n + k <= cap) {
            memmove(b + pos + k, b + pos, n - pos);
            memcpy(b + pos, t, k);
            *len = n + k;
        }
        break;
    }
    case 3: /* truncate */ *len = pos; break;
    case 4: { /* duplicate a span */
        size_t k = 1 + rnd() % 16;
        if (pos + k > n)
            k = n - pos;
        if (n + k <= cap) {
            memmove(b + pos + k, b + pos, n - pos);
            memcpy(b + pos + k, b + pos, k); /* the span now sits twice */
            *len = n + k;
        }
        break;
    }
    default: /* replace a digit with another */
        for (size_t i = pos; i < n; i++)
            if (b[i] >= '0' && b[i] <= '9') {
                b[i] = (char)('0' + rnd() % 10);
                break;
            }
    }
}

static void test_fuzz(void) {
    enum { ITERS = 20000, CAP = 4096 };
    char *b = malloc(CAP);
    int parsed = 0, rejected = 0, bad = 0;
    for (int it = 0; it < ITERS; it++) {
        const char *s = seeds[rnd() % (sizeof seeds / sizeof *seeds)];
        size_t len = strlen(s);
        memcpy(b, s, len);
        int edits = (rnd() % 4) ? 1 : 2 + (int)(rnd() % 3); /* mostly one edit */
        for (int k = 0; k < edits; k++)
            mutate(b, &len, CAP);
        /* An exact-size copy, so ASan sees any read past the end. */
        char *body = malloc(len ? len : 1);
        memcpy(body, b, len);
        srv_api_error e;
        srv_completion_req r;
        int rc = srv_api_parse_completion(body, len, &L, &r, &e);
        if (rc == 0) {
            parsed++;
            int ok = params_ok(&r.params) && r.n_prompts >= 1 && r.n_prompts <= L.max_prompts;
            for (int i = 0; ok && i < r.n_prompts; i++) {
                const srv_prompt *pr = &r.prompts[i];
                if (pr->is_tokens) {
                    ok = pr->n_ids > 0;
                    for (int j = 0; ok && j < pr->n_ids; j++)
                        ok = pr->ids[j] >= 0 && pr->ids[j] < NV;
                } else {
                    ok = pr->text_len > 0 && text_ok(pr->text, pr->text_len);
                }
            }
            if (!ok)
                bad++;
        } else {
            rejected++;
            if (rc != BRISK_EINVAL || e.status != 400 || !bt_one_line(e.message) ||
                !is_zero(&r, sizeof r))
                bad++;
        }
        srv_completion_req_free(&r);
        srv_chat_req c;
        rc = srv_api_parse_chat(body, len, &L, &c, &e);
        if (rc == 0) {
            int ok = params_ok(&c.params) && c.n_msgs >= 1;
            for (int i = 0; ok && i < c.n_msgs; i++)
                ok = text_ok(c.msgs[i].content, c.msgs[i].content_len) &&
                     (!strcmp(c.msgs[i].role, "system") || !strcmp(c.msgs[i].role, "user") ||
                      !strcmp(c.msgs[i].role, "assistant"));
            if (!ok)
                bad++;
        } else if (rc != BRISK_EINVAL || e.status != 400 || !bt_one_line(e.message) ||
                   !is_zero(&c, sizeof c)) {
            bad++;
        }
        srv_chat_req_free(&c);
        free(body);
    }
    printf("fuzz: %d mutated bodies: %d parsed, %d rejected with 400\n", ITERS, parsed, rejected);
    CHECK(bad == 0, "%d mutated bodies broke an invariant", bad);
    CHECK(parsed > 100 && rejected > 100, "the mutations reach both outcomes");
    free(b);
}

int main(void) {
    L = srv_api_limits_default(NV);
    L.max_logit_bias = 8;
    test_bad_tables();
    test_limits();
    test_good_completion();
    test_good_chat();
    test_raw_bytes();
    test_depth();
    test_many_keys();
    test_error_json();
    test_fuzz();
    return BT_SUMMARY("test_srv_api");
}
