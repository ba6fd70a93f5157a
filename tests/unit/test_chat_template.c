/* test_chat_template.c - chat template detection and rendering against the
 * real templates of each family.
 *
 * The template strings below are the published `chat_template`s of the named
 * models (most as listed in llama.cpp's tests/test-chat-template.cpp, the
 * others from the models' tokenizer_config.json; the Mistral v3 ones without
 * their tool-call branches; Qwen2.5's written out from the published template,
 * not byte-compared with the file). The expected texts were rendered from those
 * templates with jinja2 exactly as transformers does (trim_blocks,
 * lstrip_blocks, add_generation_prompt, bos "<s>", eos "</s>") for the
 * conversation of llama.cpp's test, with and without its system message.
 * Where the real template raises on a system message (Mistral v0.2, Gemma 1)
 * or silently drops it (Phi-3-mini 2024-06), the expected text follows the
 * rule chat_template.h documents instead (real_case.hand = 1).
 * scripts/gen_chat_template_vectors.py regenerates the data block below. */
#include <stdint.h>
#include <string.h>

#include "brisk_test.h"
#include "common/brisk_error.h"
#include "models/chat_template.h"
#include "models/model.h"
#include "models/tokenizer.h"

typedef struct {
    const char *name;
    const char *tmpl;
    model_chat_kind kind;
    const char *want;       /* the conversation below */
    const char *want_nosys; /* the same without its system message */
    int hand;
} real_case;

/* llama.cpp's test conversation: system, then alternating turns. */
static const model_chat_msg conv[] = {
    {"system", "You are a helpful assistant", 27},
    {"user", "Hello", 5},
    {"assistant", "Hi there", 8},
    {"user", "Who are you", 11},
    {"assistant", "   I am an assistant   ", 23},
    {"user", "Another question", 16},
};
#define N_CONV ((int)(sizeof conv / sizeof conv[0]))

/* ---- generated from the real templates with jinja2 by
 * scripts/gen_chat_template_vectors.py (up to unrecognised[]) ---- */
static const char tmpl_chatml_openhermes[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message"
    "['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";
static const char want_chatml_openhermes[] =
    "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\n"
    "Hello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\n"
    "Who are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
    "<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n";
static const char want_chatml_openhermes_nosys[] =
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n"
    "<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n"
    "   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
    "<|im_start|>assistant\n";
static const char tmpl_chatml_smollm2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system'"
    " %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained b"
    "y Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n"
    "' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_pr"
    "ompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
static const char want_chatml_smollm2[] =
    "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\n"
    "Hello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\n"
    "Who are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
    "<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n";
static const char want_chatml_smollm2_nosys[] =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Huggi"
    "ng Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    "Hi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
    "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\n"
    "Another question<|im_end|>\n<|im_start|>assistant\n";
static const char tmpl_chatml_qwen2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system'"
    " %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '"
    "<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>ass"
    "istant\n' }}{% endif %}";
static const char want_chatml_qwen2[] =
    "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\n"
    "Hello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\n"
    "Who are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
    "<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n";
static const char want_chatml_qwen2_nosys[] =
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "Hello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\n"
    "Who are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
    "<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n";
static const char tmpl_chatml_qwen25[] =
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role"
    "'] == 'system' %}\n        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "' }}\n    {%- endif %}\n    {{- \"\\n\\n# Tools\\n\\nYou may call one or more fun"
    "ctions to assist with the user query.\\n\\nYou are provided with function signatu"
    "res within <tools></tools> XML tags:\\n<tools>\" }}\n    {%- for tool in tools %}"
    "\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with func"
    "tion name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    "{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_c"
    "all><|im_end|>\\n\" }}\n{%- else %}\n    {%- if messages[0]['role'] == 'system' %"
    "}\n        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n'"
    " }}\n    {%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by "
    "Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop"
    ".first) or (message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>"
    "' + '\\n' }}\n    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call."
    "function is defined %}\n                {%- set tool_call = tool_call.function %}"
    "\n            {%- endif %}\n            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n            {{- '}\\n</tool_call"
    ">' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n        {%- if (loop.index0 == 0) or (m"
    "essages[loop.index0 - 1].role != \"tool\") %}\n            {{- '<|im_start|>user'"
    " }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n"
    "{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n"
    "' }}\n{%- endif %}\n";
static const char want_chatml_qwen25[] =
    "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\n"
    "Hello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\n"
    "Who are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
    "<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n";
static const char want_chatml_qwen25_nosys[] =
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful ass"
    "istant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    "Hi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
    "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\n"
    "Another question<|im_end|>\n<|im_start|>assistant\n";
static const char tmpl_llama2_meta[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% "
    "set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = me"
    "ssages %}{% set system_message = false %}{% endif %}{% for message in loop_messag"
    "es %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_excep"
    "tion('Conversation roles must alternate user/assistant/user/assistant/...') }}{% "
    "endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<"
    "SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %"
    "}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user'"
    " %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['rol"
    "e'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% "
    "endfor %}";
static const char want_llama2_meta[] =
    "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi ther"
    "e </s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another quest"
    "ion [/INST]";
static const char want_llama2_meta_nosys[] =
    "<s>[INST] Hello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assist"
    "ant </s><s>[INST] Another question [/INST]";
static const char tmpl_llama3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set conten"
    "t = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n"
    "\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set c"
    "ontent = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_gene"
    "ration_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n"
    "\n' }}{% endif %}";
static const char want_llama3[] =
    "<s><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot"
    "_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id"
    "|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_he"
    "ader_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
    "\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\n";
static const char want_llama3_nosys[] =
    "<s><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>"
    "assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_head"
    "er_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
    "\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\n";
static const char tmpl_mistral_v02[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate us"
    "er/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assi"
    "stant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only us"
    "er and assistant roles are supported!') }}{% endif %}{% endfor %}";
static const char want_mistral_v02[] =
    "<s>[INST] You are a helpful assistant\n\nHello [/INST]Hi there</s>[INST] Who are "
    "you [/INST]   I am an assistant   </s>[INST] Another question [/INST]";
static const char want_mistral_v02_nosys[] =
    "<s>[INST] Hello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant"
    "   </s>[INST] Another question [/INST]";
static const char tmpl_mistral_v1[] =
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages["
    "0]['content'] %}\n    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n"
    "\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if (message['rol"
    "e'] == 'user') != (loop.index0 % 2 == 0) %}\n        {{- raise_exception('After t"
    "he optional system message, conversation roles must alternate user/assistant/user"
    "/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n            {{- ' [IN"
    "ST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]'"
    " }}\n        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n"
    "        {{- ' ' + message['content'] + eos_token}}\n    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported, with th"
    "e exception of an initial optional system message!') }}\n    {%- endif %}\n"
    "{%- endfor %}\n";
static const char want_mistral_v1[] =
    "<s> [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who a"
    "re you [/INST]    I am an assistant   </s> [INST] Another question [/INST]";
static const char want_mistral_v1_nosys[] =
    "<s> [INST] Hello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an assis"
    "tant   </s> [INST] Another question [/INST]";
static const char tmpl_mistral_v3[] =
    "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- set system_message = messa"
    "ges[0][\"content\"] %}\n    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n"
    "{%- if not tools is defined %}\n    {%- set tools = none %}\n"
    "{%- endif %}\n{%- set user_messages = loop_messages | selectattr(\"role\", \"equa"
    "lto\", \"user\") | list %}\n\n{#- This block checks for alternating user/assistan"
    "t messages, skipping tool calling messages #}\n{%- set ns = namespace() %}\n"
    "{%- set ns.index = 0 %}\n{%- for message in loop_messages %}\n"
    "    {%- if not (message.role == \"tool\" or message.role == \"tool_results\" or ("
    "message.tool_calls is defined and message.tool_calls is not none)) %}\n"
    "        {%- if (message[\"role\"] == \"user\") != (ns.index % 2 == 0) %}\n"
    "            {{- raise_exception(\"After the optional system message, conversation"
    " roles must alternate user/assistant/user/assistant/...\") }}\n"
    "        {%- endif %}\n        {%- set ns.index = ns.index + 1 %}\n"
    "    {%- endif %}\n{%- endfor %}\n\n{{- bos_token }}\n{%- for message in loop_mess"
    "ages %}\n    {%- if message[\"role\"] == \"user\" %}\n        {%- if loop.last an"
    "d system_message is defined %}\n            {{- \"[INST] \" + system_message + \""
    "\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n        {%- else %}\n"
    "            {{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}\n"
    "        {%- endif %}\n    {%- elif message[\"role\"] == \"assistant\" %}\n"
    "        {{- \" \" + message[\"content\"]|trim + eos_token}}\n"
    "    {%- else %}\n        {{- raise_exception(\"Only user and assistant roles are "
    "supported, with the exception of an initial optional system message!\") }}\n"
    "    {%- endif %}\n{%- endfor %}\n";
static const char want_mistral_v3[] =
    "<s>[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s"
    ">[INST] You are a helpful assistant\n\nAnother question[/INST]";
static const char want_mistral_v3_nosys[] =
    "<s>[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s"
    ">[INST] Another question[/INST]";
static const char tmpl_mistral_tekken[] =
    "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- set system_message = messa"
    "ges[0][\"content\"] %}\n    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n"
    "{%- if not tools is defined %}\n    {%- set tools = none %}\n"
    "{%- endif %}\n{%- set user_messages = loop_messages | selectattr(\"role\", \"equa"
    "lto\", \"user\") | list %}\n\n{#- This block checks for alternating user/assistan"
    "t messages, skipping tool calling messages #}\n{%- set ns = namespace() %}\n"
    "{%- set ns.index = 0 %}\n{%- for message in loop_messages %}\n"
    "    {%- if not (message.role == \"tool\" or message.role == \"tool_results\" or ("
    "message.tool_calls is defined and message.tool_calls is not none)) %}\n"
    "        {%- if (message[\"role\"] == \"user\") != (ns.index % 2 == 0) %}\n"
    "            {{- raise_exception(\"After the optional system message, conversation"
    " roles must alternate user/assistant/user/assistant/...\") }}\n"
    "        {%- endif %}\n        {%- set ns.index = ns.index + 1 %}\n"
    "    {%- endif %}\n{%- endfor %}\n\n{{- bos_token }}\n{%- for message in loop_mess"
    "ages %}\n    {%- if message[\"role\"] == \"user\" %}\n        {%- if loop.last an"
    "d system_message is defined %}\n            {{- \"[INST]\" + system_message + \"\\"
    "n\\n\" + message[\"content\"] + \"[/INST]\" }}\n        {%- else %}\n"
    "            {{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}\n"
    "        {%- endif %}\n    {%- elif message[\"role\"] == \"assistant\" %}\n"
    "        {{- message[\"content\"] + eos_token}}\n    {%- else %}\n"
    "        {{- raise_exception(\"Only user and assistant roles are supported, with t"
    "he exception of an initial optional system message!\") }}\n    {%- endif %}\n"
    "{%- endfor %}\n";
static const char want_mistral_tekken[] =
    "<s>[INST]Hello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   <"
    "/s>[INST]You are a helpful assistant\n\nAnother question[/INST]";
static const char want_mistral_tekken_nosys[] =
    "<s>[INST]Hello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   <"
    "/s>[INST]Another question[/INST]";
static const char tmpl_mistral_v7[] =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ "
    "'[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' "
    "%}{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif messa"
    "ge['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% else %}{"
    "{ raise_exception('Only user, system and assistant roles are supported!') }}{% en"
    "dif %}{% endfor %}";
static const char want_mistral_v7[] =
    "<s>[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST]"
    " Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another "
    "question[/INST]";
static const char want_mistral_v7_nosys[] =
    "<s>[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]    I am an assistant"
    "   </s>[INST] Another question[/INST]";
static const char tmpl_zephyr[] =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == '"
    "system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n"
    "'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_gene"
    "ration_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";
static const char want_zephyr[] =
    "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n"
    "<|assistant|>\nHi there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n"
    "   I am an assistant   </s>\n<|user|>\nAnother question</s>\n"
    "<|assistant|>\n";
static const char want_zephyr_nosys[] =
    "<|user|>\nHello</s>\n<|assistant|>\nHi there</s>\n<|user|>\nWho are you</s>\n"
    "<|assistant|>\n   I am an assistant   </s>\n<|user|>\nAnother question</s>\n"
    "<|assistant|>\n";
static const char tmpl_gemma_7b[] =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System"
    " role not supported') }}{% endif %}{% for message in messages %}{% if (message['r"
    "ole'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation rol"
    "es must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message"
    "['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = messag"
    "e['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | "
    "trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of"
    "_turn>model\n'}}{% endif %}";
static const char want_gemma_7b[] =
    "<s><start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
    "<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\n"
    "Who are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n"
    "<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n";
static const char want_gemma_7b_nosys[] =
    "<s><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"
    "Hi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n"
    "<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\n"
    "Another question<end_of_turn>\n<start_of_turn>model\n";
static const char tmpl_gemma3[] =
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n        {%- set first_user_prefi"
    "x = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n        {%- set first_"
    "user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n    {%- set loop_messages"
    " = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/use"
    "r/assistant/...\") }}\n    {%- endif -%}\n    {%- if (message['role'] == 'assista"
    "nt') -%}\n        {%- set role = \"model\" -%}\n    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \""
    "\") }}\n    {%- if message['content'] is string -%}\n        {{ message['content'"
    "] | trim }}\n    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n            {%- if item['type'] ="
    "= 'image' -%}\n                {{ '<start_of_image>' }}\n            {%- elif ite"
    "m['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n";
static const char want_gemma3[] =
    "<s><start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
    "<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\n"
    "Who are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n"
    "<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n";
static const char want_gemma3_nosys[] =
    "<s><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"
    "Hi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n"
    "<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\n"
    "Another question<end_of_turn>\n<start_of_turn>model\n";
static const char tmpl_phi3_mini[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{"
    "{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n"
    "'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + "
    "'\n'}}{% endif %}{% endfor %}";
static const char want_phi3_mini[] =
    "<s><|system|>\nYou are a helpful assistant<|end|>\n<|user|>\n"
    "Hello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n"
    "<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n"
    "<|assistant|>\n";
static const char want_phi3_mini_nosys[] =
    "<s><|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\n"
    "Who are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n"
    "<|user|>\nAnother question<|end|>\n<|assistant|>\n";
static const char tmpl_phi3_small[] =
    "{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n"
    "' + message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";
static const char want_phi3_small[] =
    "<s><|system|>\nYou are a helpful assistant<|end|>\n<|user|>\n"
    "Hello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n"
    "<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n"
    "<|assistant|>\n";
static const char want_phi3_small_nosys[] =
    "<s><|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\n"
    "Who are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n"
    "<|user|>\nAnother question<|end|>\n<|assistant|>\n";
static const char tmpl_phi3_vision[] =
    "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n"
    "' + message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt an"
    "d messages[-1]['role'] != 'assistant' %}{{- '<|assistant|>\n' -}}{% endif %}";
static const char want_phi3_vision[] =
    "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n"
    "<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n"
    "<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n"
    "<|assistant|>\n";
static const char want_phi3_vision_nosys[] =
    "<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\n"
    "Who are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n"
    "<|user|>\nAnother question<|end|>\n<|assistant|>\n";
static const char tmpl_phi35[] =
    "{% for message in messages %}{% if message['role'] == 'system' and message['conte"
    "nt'] %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role"
    "'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n"
    "'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n"
    "' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation"
    "_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";
static const char want_phi35[] =
    "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n"
    "<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n"
    "<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n"
    "<|assistant|>\n";
static const char want_phi35_nosys[] =
    "<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\n"
    "Who are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n"
    "<|user|>\nAnother question<|end|>\n<|assistant|>\n";
static const char tmpl_llama3_2[] =
    "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_t"
    "ools %}\n{%- endif %}\n{%- if not tools_in_user_message is defined %}\n"
    "    {%- set tools_in_user_message = true %}\n{%- endif %}\n{%- if not date_string"
    " is defined %}\n    {%- if strftime_now is defined %}\n        {%- set date_strin"
    "g = strftime_now(\"%d %b %Y\") %}\n    {%- else %}\n        {%- set date_string ="
    " \"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}\n{%- if not tools is defined "
    "%}\n    {%- set tools = none %}\n{%- endif %}\n\n{#- This block extracts the syst"
    "em message, so we can slot it into the right place. #}\n{%- if messages[0]['role'"
    "] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message ="
    " \"\" %}\n{%- endif %}\n\n{#- System message #}\n{{- \"<|start_header_id|>system<"
    "|end_header_id|>\\n\\n\" }}\n{%- if tools is not none %}\n    {{- \"Environment: "
    "ipython\\n\" }}\n{%- endif %}\n{{- \"Cutting Knowledge Date: December 2023\\n\" }"
    "}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{%- if tools is not none a"
    "nd not tools_in_user_message %}\n    {{- \"You have access to the following funct"
    "ions. To call a function, please respond with JSON for a function call.\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictiona"
    "ry of argument name and its value}.' }}\n    {{- \"Do not use variables.\\n\\n\" "
    "}}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n    {%- endfor %}\n{%- endif %}\n{{- system_message }}"
    "\n{{- \"<|eot_id|>\" }}\n\n{#- Custom tools are passed in a user message with som"
    "e extra guidance #}\n{%- if tools_in_user_message and not tools is none %}\n"
    "    {#- Extract the first user message so we can plug it in here #}\n"
    "    {%- if messages | length != 0 %}\n        {%- set first_user_message = messag"
    "es[0]['content']|trim %}\n        {%- set messages = messages[1:] %}\n"
    "    {%- else %}\n        {{- raise_exception(\"Cannot put tools in the first user"
    " message when there's no first user message!\") }}\n{%- endif %}\n"
    "    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
    "    {{- \"Given the following functions, please respond with a JSON for a functio"
    "n call \" }}\n    {{- \"with its proper arguments that best answers the given pro"
    "mpt.\\n\\n\" }}\n    {{- 'Respond in the format {\"name\": function name, \"param"
    "eters\": dictionary of argument name and its value}.' }}\n    {{- \"Do not use va"
    "riables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) "
    "}}\n        {{- \"\\n\\n\" }}\n    {%- endfor %}\n    {{- first_user_message + \""
    "<|eot_id|>\"}}\n{%- endif %}\n\n{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_call"
    "s' in message) %}\n        {{- '<|start_header_id|>' + message['role'] + '<|end_h"
    "eader_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
    "    {%- elif 'tool_calls' in message %}\n        {%- if not message.tool_calls|le"
    "ngth == 1 %}\n            {{- raise_exception(\"This model only supports single t"
    "ool-calls at once!\") }}\n        {%- endif %}\n        {%- set tool_call = messa"
    "ge.tool_calls[0].function %}\n        {{- '<|start_header_id|>assistant<|end_head"
    "er_id|>\\n\\n' -}}\n        {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n"
    "        {{- '\"parameters\": ' }}\n        {{- tool_call.arguments | tojson }}\n"
    "        {{- \"}\" }}\n        {{- \"<|eot_id|>\" }}\n    {%- elif message.role =="
    " \"tool\" or message.role == \"ipython\" %}\n        {{- \"<|start_header_id|>ipy"
    "thon<|end_header_id|>\\n\\n\" }}\n        {%- if message.content is mapping or me"
    "ssage.content is iterable %}\n            {{- message.content | tojson }}\n"
    "        {%- else %}\n            {{- message.content }}\n        {%- endif %}\n"
    "        {{- \"<|eot_id|>\" }}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_heade"
    "r_id|>\\n\\n' }}\n{%- endif %}";
static const char want_llama3_2[] =
    "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December"
    " 2023\nToday Date: 26 Jul 2024\n\nYou are a helpful assistant<|eot_id|><|start_he"
    "ader_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|en"
    "d_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
    "\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
    "\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\n";
static const char want_llama3_2_nosys[] =
    "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December"
    " 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_i"
    "d|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
    "\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
    "\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\n";

static const real_case real_cases[] = {
    {"chatml_openhermes", tmpl_chatml_openhermes, MODEL_CHAT_CHATML, want_chatml_openhermes,
     want_chatml_openhermes_nosys, 0},
    {"chatml_smollm2", tmpl_chatml_smollm2, MODEL_CHAT_CHATML, want_chatml_smollm2,
     want_chatml_smollm2_nosys, 0},
    {"chatml_qwen2", tmpl_chatml_qwen2, MODEL_CHAT_CHATML, want_chatml_qwen2,
     want_chatml_qwen2_nosys, 0},
    {"chatml_qwen25", tmpl_chatml_qwen25, MODEL_CHAT_CHATML, want_chatml_qwen25,
     want_chatml_qwen25_nosys, 0},
    {"llama2_meta", tmpl_llama2_meta, MODEL_CHAT_LLAMA2, want_llama2_meta, want_llama2_meta_nosys,
     0},
    {"llama3", tmpl_llama3, MODEL_CHAT_LLAMA3, want_llama3, want_llama3_nosys, 0},
    {"mistral_v02", tmpl_mistral_v02, MODEL_CHAT_MISTRAL, want_mistral_v02, want_mistral_v02_nosys,
     1},
    {"mistral_v1", tmpl_mistral_v1, MODEL_CHAT_MISTRAL, want_mistral_v1, want_mistral_v1_nosys, 0},
    {"mistral_v3", tmpl_mistral_v3, MODEL_CHAT_MISTRAL, want_mistral_v3, want_mistral_v3_nosys, 0},
    {"mistral_tekken", tmpl_mistral_tekken, MODEL_CHAT_MISTRAL, want_mistral_tekken,
     want_mistral_tekken_nosys, 0},
    {"mistral_v7", tmpl_mistral_v7, MODEL_CHAT_MISTRAL, want_mistral_v7, want_mistral_v7_nosys, 0},
    {"zephyr", tmpl_zephyr, MODEL_CHAT_ZEPHYR, want_zephyr, want_zephyr_nosys, 0},
    {"gemma_7b", tmpl_gemma_7b, MODEL_CHAT_GEMMA, want_gemma_7b, want_gemma_7b_nosys, 1},
    {"gemma3", tmpl_gemma3, MODEL_CHAT_GEMMA, want_gemma3, want_gemma3_nosys, 0},
    {"phi3_mini", tmpl_phi3_mini, MODEL_CHAT_PHI3, want_phi3_mini, want_phi3_mini_nosys, 1},
    {"phi3_small", tmpl_phi3_small, MODEL_CHAT_PHI3, want_phi3_small, want_phi3_small_nosys, 0},
    {"phi3_vision", tmpl_phi3_vision, MODEL_CHAT_PHI3, want_phi3_vision, want_phi3_vision_nosys, 0},
    {"phi35", tmpl_phi35, MODEL_CHAT_PHI3, want_phi35, want_phi35_nosys, 0},
    {"llama3_2", tmpl_llama3_2, MODEL_CHAT_LLAMA3, want_llama3_2, want_llama3_2_nosys, 0},
};

static const char *const unrecognised[] = {
    /* phi4 */ "{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|"
               ">system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] "
               "== 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|><|i"
               "m_start|>assistant<|im_sep|>'}}{% elif (message['role'] == 'assistant') %}{{messa"
               "ge['content'] + '<|im_end|>'}}{% endif %}{% endfor %}",
    /* chatglm3 */
    "{% for message in messages %}{% if loop.first %}[gMASK]sop<|{{ message['role'] }}"
    "|>\n {{ message['content'] }}{% else %}<|{{ message['role'] }}|>\n"
    " {{ message['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|a"
    "ssistant|>{% endif %}",
    /* glmedge */
    "{% for item in messages %}{% if item['role'] == 'system' %}<|system|>\n"
    "{{ item['content'] }}{% elif item['role'] == 'user' %}<|user|>\n"
    "{{ item['content'] }}{% elif item['role'] == 'assistant' %}<|assistant|>\n"
    "{{ item['content'] }}{% endif %}{% endfor %}<|assistant|>",
    /* vicuna */
    "{%- for message in messages %}{%- if message['role'] == 'system' -%}{{- '' + mess"
    "age['content'] + '\n\n' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'US"
    "ER: ' + message['content'] + '\n'-}}{%- else -%}{{-'ASSISTANT: ' + message['conte"
    "nt'] + '</s>\n' -}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_"
    "prompt -%}{{-'ASSISTANT:'-}}{%- endif -%}",
    /* orion */
    "{% for message in messages %}{% if loop.first %}{{ bos_token }}{% endif %}{% if m"
    "essage['role'] == 'user' %}{{ 'Human: ' + message['content'] + '\\n\\nAssistant: "
    "' + eos_token }}{% elif message['role'] == 'assistant' %}{{ message['content'] + "
    "eos_token }}{% endif %}{% endfor %}",
    /* openchat */
    "{{ bos_token }}{% for message in messages %}{{ 'GPT4 Correct ' + message['role']."
    "title() + ': ' + message['content'] + '<|end_of_turn|>'}}{% endfor %}{% if add_ge"
    "neration_prompt %}{{ 'GPT4 Correct Assistant:' }}{% endif %}",
    /* granite */
    "{%- for message in messages %}\n    {%- if message['role'] == 'assistant_tool_cal"
    "l' %}\n    {{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' + message"
    "['content'] + '<|end_of_text|>\\n' }}\n    {%- else %}\n    {{- '<|start_of_role|"
    ">' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\\"
    "n' }}\n    {%- endif %}\n    {%- if loop.last and add_generation_prompt %}\n"
    "    {{- '<|start_of_role|>assistant<|end_of_role|>' }}\n    {%- endif %}\n"
    "{%- endfor %}",
    /* deepseek_v2 */
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false"
    " %}{% endif %}{{ bos_token }}{% for message in messages %}{% if message['role'] ="
    "= 'user' %}{{ 'User: ' + message['content'] + '\n\n' }}{% elif message['role'] =="
    " 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}{% elif messag"
    "e['role'] == 'system' %}{{ message['content'] + '\n\n' }}{% endif %}{% endfor %}{"
    "% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
    /* tulu2 */
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\n' + message['content'] }}\n{% elif message['role'] == 'assistant' %"
    "}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
    "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n"
    "{% endif %}\n{% endfor %}",
    /* invalid */ "INVALID TEMPLATE",
    /* empty */ "",
    /* plain */ "{{ messages[0]['content'] }}",
    /* phi4_mini */
    "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in mes"
    "sage and message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + messag"
    "e['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}{% else "
    "%}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_t"
    "oken }}{% endif %}",
};

/* ---- helpers -------------------------------------------------------------- */

static char *render_f(const model_chat_format *f, const model_chat_msg *m, int n, const char *bos,
                      const char *eos, int *swb) {
    char *out = (char *)1, err[256] = "";
    size_t len = 0;
    int s = -1;
    int rc = model_chat_format_render(f, m, n, bos, eos, &out, &len, &s, err, sizeof err);
    CHECK(rc == 0, "render %s: rc %d: %s", model_chat_kind_name(f->kind), rc, err);
    if (rc != 0)
        return NULL;
    CHECK(out && strlen(out) == len, "out_len %zu matches strlen", len);
    if (swb)
        *swb = s;
    return out;
}

static char *render_k(model_chat_kind k, const model_chat_msg *m, int n, const char *bos,
                      const char *eos, int *swb) {
    model_chat_format f;
    model_chat_format_default(k, &f);
    return render_f(&f, m, n, bos, eos, swb);
}

/* Renders and compares with want; prints both on a mismatch. */
static void expect_f(const char *what, const model_chat_format *f, const model_chat_msg *m, int n,
                     const char *bos, const char *eos, const char *want) {
    char *got = render_f(f, m, n, bos, eos, NULL);
    int ok = got && strcmp(got, want) == 0;
    CHECK(ok, "%s:\n  got  [%s]\n  want [%s]", what, got ? got : "(null)", want);
    free(got);
}

static void expect_k(const char *what, model_chat_kind k, const model_chat_msg *m, int n,
                     const char *bos, const char *eos, const char *want) {
    model_chat_format f;
    model_chat_format_default(k, &f);
    expect_f(what, &f, m, n, bos, eos, want);
}

/* Expects failure with code `code`, *out NULL and a one-line message. */
static void expect_err(const char *what, model_chat_kind k, const model_chat_msg *m, int n,
                       int code) {
    char *out = (char *)1, err[256] = "";
    size_t len = 7;
    int s = 7;
    int rc = model_chat_render(k, m, n, "<s>", "</s>", &out, &len, &s, err, sizeof err);
    CHECK(rc == code, "%s: rc %d, want %d", what, rc, code);
    CHECK(out == NULL && len == 0, "%s: no output on error", what);
    CHECK(bt_one_line(err), "%s: one-line error [%s]", what, err);
    if (rc == 0)
        free(out);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)((rng >> 11) % n);
}

static int ws(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static const char *trimmed(const char *s, size_t n, size_t *out_n) {
    while (n > 0 && ws(s[0]))
        s++, n--;
    while (n > 0 && ws(s[n - 1]))
        n--;
    *out_n = n;
    return s;
}

static const char *find_mem(const char *hay, size_t hn, const char *nd, size_t nn) {
    if (nn == 0)
        return hay;
    for (size_t i = 0; i + nn <= hn; i++)
        if (memcmp(hay + i, nd, nn) == 0)
            return hay + i;
    return NULL;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_real_templates(void) {
    for (size_t i = 0; i < sizeof real_cases / sizeof real_cases[0]; i++) {
        const real_case *c = &real_cases[i];
        CHECK(model_chat_detect(c->tmpl) == c->kind, "%s: detected %s, want %s", c->name,
              model_chat_kind_name(model_chat_detect(c->tmpl)), model_chat_kind_name(c->kind));
        model_chat_format f;
        model_chat_format_detect(c->tmpl, &f);
        CHECK(f.kind == c->kind, "%s: format kind", c->name);
        char what[128];
        snprintf(what, sizeof what, "%s%s", c->name, c->hand ? " (documented rule)" : "");
        expect_f(what, &f, conv, N_CONV, "<s>", "</s>", c->want);
        snprintf(what, sizeof what, "%s without system", c->name);
        expect_f(what, &f, conv + 1, N_CONV - 1, "<s>", "</s>", c->want_nosys);
    }
}

static void test_detect_details(void) {
    model_chat_format f;
    model_chat_format_detect(tmpl_chatml_openhermes, &f);
    CHECK(!(f.flags & MODEL_CHAT_F_DEFAULT_SYSTEM) && !(f.flags & MODEL_CHAT_F_BOS), "OpenHermes");
    model_chat_format_detect(tmpl_chatml_smollm2, &f);
    CHECK((f.flags & MODEL_CHAT_F_DEFAULT_SYSTEM) &&
              strcmp(f.default_system,
                     "You are a helpful AI assistant named SmolLM, trained by Hugging Face") == 0,
          "SmolLM2 default [%s]", f.default_system);
    model_chat_format_detect(tmpl_chatml_qwen2, &f);
    CHECK(strcmp(f.default_system, "You are a helpful assistant.") == 0, "Qwen2 default");
    model_chat_format_detect(tmpl_chatml_qwen25, &f);
    CHECK(strcmp(f.default_system,
                 "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.") == 0,
          "Qwen2.5 default [%s]", f.default_system);
    model_chat_format_detect(tmpl_llama3, &f);
    CHECK(f.flags == MODEL_CHAT_F_BOS, "Llama-3 flags %x", f.flags);
    model_chat_format_detect(tmpl_llama3_2, &f);
    CHECK(f.flags == (MODEL_CHAT_F_BOS | MODEL_CHAT_F_DATE_HEADER), "Llama-3.2 flags %x", f.flags);
    const model_chat_msg late[] = {{"user", "Hello", 5}, {"system", " late ", 6}};
    expect_f("llama3.2 late system (jinja2)", &f, late, 2, "<s>", "</s>",
             "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
             "2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>"
             "\n\nHello<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nlate<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n");
    model_chat_format_detect(tmpl_llama2_meta, &f);
    CHECK(f.flags == (MODEL_CHAT_F_BOS_EACH_TURN | MODEL_CHAT_F_STRIP), "Llama-2 flags %x",
          f.flags);
    static const struct {
        const char *t;
        model_chat_mistral_style s;
    } ms[] = {{tmpl_mistral_v02, MODEL_CHAT_MISTRAL_V0},
              {tmpl_mistral_v1, MODEL_CHAT_MISTRAL_V1},
              {tmpl_mistral_v3, MODEL_CHAT_MISTRAL_V3},
              {tmpl_mistral_tekken, MODEL_CHAT_MISTRAL_V3_TEKKEN},
              {tmpl_mistral_v7, MODEL_CHAT_MISTRAL_V7}};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        model_chat_format_detect(ms[i].t, &f);
        CHECK(f.kind == MODEL_CHAT_MISTRAL && f.mistral == ms[i].s && (f.flags & MODEL_CHAT_F_BOS),
              "mistral style %zu: got %d", i, (int)f.mistral);
    }
    model_chat_format_detect(tmpl_phi35, &f);
    CHECK(f.flags == MODEL_CHAT_F_SKIP_EMPTY_SYSTEM, "Phi-3.5 flags %x", f.flags);
    model_chat_format_detect(tmpl_phi3_small, &f);
    CHECK(f.flags == MODEL_CHAT_F_BOS, "Phi-3-small flags %x", f.flags);

    /* Default system prompts: escapes decoded, either quote, concatenations
     * skipped, an oversized one ignored. */
    model_chat_format_detect("{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
                             "It\\'s me\\\\here\\tx<|im_end|>\\n' }}{% endif %}",
                             &f);
    CHECK(f.kind == MODEL_CHAT_CHATML && strcmp(f.default_system, "It's me\\here\tx") == 0,
          "escaped default [%s]", f.default_system);
    model_chat_format_detect("{{ \"<|im_start|>system\\nSay \\\"hi\\\"<|im_end|>\\n\" }}", &f);
    CHECK(strcmp(f.default_system, "Say \"hi\"") == 0, "double-quoted default [%s]",
          f.default_system);
    model_chat_format_detect(
        "{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>' }}", &f);
    CHECK(f.kind == MODEL_CHAT_CHATML && !(f.flags & MODEL_CHAT_F_DEFAULT_SYSTEM),
          "concatenation is no default");
    model_chat_format_detect("{{ '<|im_start|>system\\n<|im_end|>\\n' }}<|im_start|>", &f);
    CHECK((f.flags & MODEL_CHAT_F_DEFAULT_SYSTEM) && f.default_system[0] == '\0', "empty default");
    size_t big = MODEL_CHAT_DEFAULT_SYSTEM_MAX + 100;
    char *t = malloc(big + 64);
    if (t) {
        strcpy(t, "{{ '<|im_start|>system\\n");
        size_t l = strlen(t);
        memset(t + l, 'x', big);
        strcpy(t + l + big, "<|im_end|>\\n' }}");
        model_chat_format_detect(t, &f);
        CHECK(f.kind == MODEL_CHAT_CHATML && !(f.flags & MODEL_CHAT_F_DEFAULT_SYSTEM),
              "oversized default ignored");
        free(t);
    }
}

static void test_unrecognised(void) {
    for (size_t i = 0; i < sizeof unrecognised / sizeof unrecognised[0]; i++)
        CHECK(model_chat_detect(unrecognised[i]) == MODEL_CHAT_NONE, "unrecognised %zu -> %s", i,
              model_chat_kind_name(model_chat_detect(unrecognised[i])));
    CHECK(model_chat_detect(NULL) == MODEL_CHAT_NONE, "NULL");
    model_chat_format f;
    model_chat_format_detect(NULL, &f);
    CHECK(f.kind == MODEL_CHAT_NONE && f.flags == 0, "NULL format");

    /* Every prefix of every real template and random strings built from tag
     * fragments: detection never reads out of bounds (ASan) and agrees with
     * itself. */
    for (size_t i = 0; i < sizeof real_cases / sizeof real_cases[0]; i++) {
        const char *tm = real_cases[i].tmpl;
        size_t n = strlen(tm);
        char *cut = malloc(n + 1);
        if (!cut)
            continue;
        for (size_t l = 0; l <= n; l += 1 + rnd(7)) {
            memcpy(cut, tm, l);
            cut[l] = '\0';
            model_chat_format_detect(cut, &f);
            CHECK(f.kind == model_chat_detect(cut), "prefix %zu of %s", l, real_cases[i].name);
        }
        free(cut);
    }
    static const char *const frag[] = {
        "<|im_start|>",   "system",   "\\n", "\n",  "'",       "\"",        "\\", "<|im_end|>",
        "[INST]",         "<|user|>", "|>",  " + ", "<|end|>", "eos_token", "x",  "<<SYS>>",
        "<start_of_turn>"};
    char buf[512];
    for (int it = 0; it < 3000; it++) {
        size_t l = 0;
        int parts = (int)rnd(24);
        for (int p = 0; p < parts; p++) {
            const char *s = frag[rnd(sizeof frag / sizeof frag[0])];
            size_t sl = strlen(s);
            if (l + sl >= sizeof buf)
                break;
            memcpy(buf + l, s, sl);
            l += sl;
        }
        buf[l] = '\0';
        model_chat_format_detect(buf, &f);
        CHECK(f.kind == model_chat_detect(buf) &&
                  strlen(f.default_system) < sizeof f.default_system,
              "random template %d", it);
    }
}

static void test_names(void) {
    static const char *const names[] = {"chatml", "llama2", "llama3", "mistral",
                                        "zephyr", "gemma",  "phi3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        model_chat_kind k = MODEL_CHAT_NONE;
        CHECK(model_chat_kind_parse(names[i], &k) == 0 && k != MODEL_CHAT_NONE, "parse %s",
              names[i]);
        CHECK(strcmp(model_chat_kind_name(k), names[i]) == 0, "name of %s", names[i]);
    }
    model_chat_kind k = MODEL_CHAT_GEMMA;
    CHECK(model_chat_kind_parse("ChatML", &k) == BRISK_EINVAL && k == MODEL_CHAT_GEMMA, "case");
    CHECK(model_chat_kind_parse("", &k) == BRISK_EINVAL, "empty name");
    CHECK(model_chat_kind_parse("none", &k) == BRISK_EINVAL, "none is no template");
    CHECK(model_chat_kind_parse(NULL, &k) == BRISK_EINVAL, "NULL name");
    CHECK(strcmp(model_chat_kind_name(MODEL_CHAT_NONE), "none") == 0, "none");
    CHECK(strcmp(model_chat_kind_name((model_chat_kind)99), "unknown") == 0, "out of range");
}

static void test_stop_strings(void) {
    static const struct {
        model_chat_kind k;
        const char *first;
    } want[] = {{MODEL_CHAT_CHATML, "<|im_end|>"}, {MODEL_CHAT_LLAMA2, "</s>"},
                {MODEL_CHAT_LLAMA3, "<|eot_id|>"}, {MODEL_CHAT_MISTRAL, "</s>"},
                {MODEL_CHAT_ZEPHYR, "</s>"},       {MODEL_CHAT_GEMMA, "<end_of_turn>"},
                {MODEL_CHAT_PHI3, "<|end|>"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *const *s = model_chat_stop_strings(want[i].k);
        CHECK(s && s[0] && strcmp(s[0], want[i].first) == 0, "stop of %s",
              model_chat_kind_name(want[i].k));
        int n = 0;
        while (s && s[n])
            n++;
        CHECK(n >= 1 && n <= 4, "stop list of %s terminated", model_chat_kind_name(want[i].k));
    }
    CHECK(model_chat_stop_strings(MODEL_CHAT_NONE)[0] == NULL, "none");
    CHECK(model_chat_stop_strings((model_chat_kind)99)[0] == NULL, "out of range");
}

/* model_chat_render(kind) is the canonical template of each family: the
 * texts of the task description. */
static void test_canonical(void) {
    expect_k("chatml", MODEL_CHAT_CHATML, conv, N_CONV, "<s>", "</s>", want_chatml_openhermes);
    expect_k("llama2", MODEL_CHAT_LLAMA2, conv, N_CONV, "<s>", "</s>", want_llama2_meta);
    expect_k("llama3", MODEL_CHAT_LLAMA3, conv, N_CONV, "<s>", "</s>", want_llama3);
    expect_k("mistral", MODEL_CHAT_MISTRAL, conv, N_CONV, "<s>", "</s>", want_mistral_v02);
    expect_k("zephyr", MODEL_CHAT_ZEPHYR, conv, N_CONV, "<s>", "</s>", want_zephyr);
    expect_k("gemma", MODEL_CHAT_GEMMA, conv, N_CONV, "<s>", "</s>", want_gemma3);
    expect_k("phi3", MODEL_CHAT_PHI3, conv, N_CONV, "<s>", "</s>", want_phi35);
    expect_k("llama3 real bos", MODEL_CHAT_LLAMA3, conv + 1, 1, "<|begin_of_text|>", "<|eot_id|>",
             "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n");

    /* starts_with_bos: the text begins with the non-empty BOS text. */
    int s = -1;
    char *o = render_k(MODEL_CHAT_LLAMA2, conv, N_CONV, "<s>", "</s>", &s);
    CHECK(s == 1, "llama2 starts with bos");
    free(o);
    o = render_k(MODEL_CHAT_LLAMA2, conv, N_CONV, NULL, NULL, &s);
    CHECK(o && s == 0 && strncmp(o, "[INST] <<SYS>>", 14) == 0 && !strstr(o, "</s>"),
          "llama2 without bos/eos [%s]", o ? o : "");
    free(o);
    o = render_k(MODEL_CHAT_ZEPHYR, conv, N_CONV, "<s>", "</s>", &s);
    CHECK(s == 0, "zephyr writes no bos");
    free(o);
    o = render_k(MODEL_CHAT_GEMMA, conv, N_CONV, "", "", &s);
    CHECK(o && s == 0 && strncmp(o, "<start_of_turn>", 15) == 0, "gemma with empty bos");
    free(o);
    /* SmolLM2's BOS is <|im_start|>: a ChatML prompt begins with it. */
    o = render_k(MODEL_CHAT_CHATML, conv, N_CONV, "<|im_start|>", "<|im_end|>", &s);
    CHECK(s == 1, "chatml text starts with the <|im_start|> bos");
    free(o);
    o = render_k(MODEL_CHAT_CHATML, conv, N_CONV, "<|endoftext|>", "<|endoftext|>", &s);
    CHECK(s == 0, "chatml with another bos");
    free(o);
}

/* Decisions where real templates raise: lenient and well-formed. */
static void test_lenient(void) {
    const model_chat_msg uu[] = {{"user", "a", 1}, {"user", "b", 1}};
    const model_chat_msg usu[] = {{"user", "a", 1}, {"system", "S", 1}, {"user", "b", 1}};
    const model_chat_msg s_only[] = {{"system", "S", 1}};
    const model_chat_msg ssu[] = {{"system", "A", 1}, {"system", "B", 1}, {"user", "u", 1}};
    const model_chat_msg ws[] = {{"user", "  hi  ", 6}, {"assistant", "\t yo \n", 6}};
    const model_chat_msg a_only[] = {{"assistant", "x", 1}};

    expect_k("llama2 user,user", MODEL_CHAT_LLAMA2, uu, 2, "<s>", "</s>",
             "<s>[INST] a [/INST]<s>[INST] b [/INST]");
    expect_k("llama2 late system", MODEL_CHAT_LLAMA2, usu, 3, "<s>", "</s>",
             "<s>[INST] a [/INST]<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nb [/INST]");
    /* strip() of '<<SYS>>\nS\n<</SYS>>\n\n' + '' as the template computes it. */
    expect_k("llama2 system only", MODEL_CHAT_LLAMA2, s_only, 1, "<s>", "</s>",
             "<s>[INST] <<SYS>>\nS\n<</SYS>> [/INST]");
    expect_k("llama2 two systems", MODEL_CHAT_LLAMA2, ssu, 3, "<s>", "</s>",
             "<s>[INST] <<SYS>>\nA\n\nB\n<</SYS>>\n\nu [/INST]");
    expect_k("llama2 strip", MODEL_CHAT_LLAMA2, ws, 2, "<s>", "</s>",
             "<s>[INST] hi [/INST] yo </s>");
    expect_k("llama2 assistant only", MODEL_CHAT_LLAMA2, a_only, 1, "<s>", "</s>", " x </s>");

    expect_k("mistral user,user", MODEL_CHAT_MISTRAL, uu, 2, "<s>", "</s>",
             "<s>[INST] a [/INST][INST] b [/INST]");
    expect_k("mistral late system", MODEL_CHAT_MISTRAL, usu, 3, "<s>", "</s>",
             "<s>[INST] a [/INST][INST] S\n\nb [/INST]");
    expect_k("mistral system only", MODEL_CHAT_MISTRAL, s_only, 1, "<s>", "</s>",
             "<s>[INST] S\n\n [/INST]");
    expect_k("mistral no strip", MODEL_CHAT_MISTRAL, ws, 2, "<s>", "</s>",
             "<s>[INST]   hi   [/INST]\t yo \n</s>");
    model_chat_format f;
    model_chat_format_detect(tmpl_mistral_v3, &f);
    const model_chat_msg v3[] = {{"system", "S", 1},
                                 {"user", "a", 1},
                                 {"assistant", "b", 1},
                                 {"user", "c", 1},
                                 {"assistant", " d ", 3}};
    expect_f("mistral v3 system on the last user turn", &f, v3, 5, "<s>", "</s>",
             "<s>[INST] a[/INST] b</s>[INST] S\n\nc[/INST] d</s>");
    expect_f("mistral v3 system only", &f, s_only, 1, "<s>", "</s>", "<s>[INST] S\n\n[/INST]");
    model_chat_format_detect(tmpl_mistral_v7, &f);
    expect_f("mistral v7 late system", &f, usu, 3, "<s>", "</s>",
             "<s>[INST] a[/INST][SYSTEM_PROMPT] S[/SYSTEM_PROMPT][INST] b[/INST]");

    expect_k("gemma late system", MODEL_CHAT_GEMMA, usu, 3, "<s>", "</s>",
             "<s><start_of_turn>user\na<end_of_turn>\n<start_of_turn>user\nS\n\nb<end_of_turn>\n"
             "<start_of_turn>model\n");
    expect_k("gemma system only", MODEL_CHAT_GEMMA, s_only, 1, "<s>", "</s>",
             "<s><start_of_turn>user\nS\n\n<end_of_turn>\n<start_of_turn>model\n");
    expect_k("gemma trims", MODEL_CHAT_GEMMA, ws, 2, "<s>", "</s>",
             "<s><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\nyo<end_of_turn>\n"
             "<start_of_turn>model\n");
    expect_k("chatml keeps whitespace and order", MODEL_CHAT_CHATML, usu, 3, NULL, NULL,
             "<|im_start|>user\na<|im_end|>\n<|im_start|>system\nS<|im_end|>\n"
             "<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n");
    expect_k("llama3 trims", MODEL_CHAT_LLAMA3, ws, 2, "", "",
             "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\nyo<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void test_empty_and_special(void) {
    const model_chat_msg empty[] = {{"system", NULL, 0}, {"user", "", 0}, {"assistant", NULL, 0}};
    static const char *const want[] = {
        [MODEL_CHAT_CHATML] = "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n"
                              "<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n",
        [MODEL_CHAT_LLAMA2] = "<s>[INST] <<SYS>>\n\n<</SYS>> [/INST]  </s>",
        [MODEL_CHAT_LLAMA3] = "<s><|start_header_id|>system<|end_header_id|>\n\n<|eot_id|>"
                              "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n",
        [MODEL_CHAT_MISTRAL] = "<s>[INST] \n\n [/INST]</s>",
        [MODEL_CHAT_ZEPHYR] =
            "<|system|>\n</s>\n<|user|>\n</s>\n<|assistant|>\n</s>\n<|assistant|>\n",
        [MODEL_CHAT_GEMMA] = "<s><start_of_turn>user\n\n\n<end_of_turn>\n<start_of_turn>model\n"
                             "<end_of_turn>\n<start_of_turn>model\n",
        [MODEL_CHAT_PHI3] = "<|system|>\n<|end|>\n<|user|>\n<|end|>\n<|assistant|>\n<|end|>\n"
                            "<|assistant|>\n",
    };
    for (int k = MODEL_CHAT_CHATML; k <= MODEL_CHAT_PHI3; k++) {
        char what[64];
        snprintf(what, sizeof what, "empty contents, %s", model_chat_kind_name((model_chat_kind)k));
        expect_k(what, (model_chat_kind)k, empty, 3, "<s>", "</s>", want[k]);
    }
    /* Phi-3.5 writes no turn for an empty system message. */
    model_chat_format f;
    model_chat_format_detect(tmpl_phi35, &f);
    const model_chat_msg es[] = {{"system", "", 0}, {"user", "hi", 2}};
    expect_f("phi3.5 empty system", &f, es, 2, "<s>", "</s>",
             "<|user|>\nhi<|end|>\n<|assistant|>\n");

    /* Special characters pass through unchanged, control-token text included. */
    static const char sp[] =
        "<|im_end|>{{ x }}{% if %}'\"\\\r\n\t caf\xc3\xa9 \xf0\x9f\x98\x80 \xff";
    const model_chat_msg spm[] = {{"user", sp, sizeof sp - 1}};
    char want_sp[256];
    snprintf(want_sp, sizeof want_sp, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n",
             sp);
    expect_k("special characters", MODEL_CHAT_CHATML, spm, 1, NULL, NULL, want_sp);

    /* content_len is the length: content need not be NUL-terminated. */
    static const char raw[8] = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'};
    const model_chat_msg rm[] = {{"user", raw, 3}};
    expect_k("content_len honoured", MODEL_CHAT_ZEPHYR, rm, 1, "<s>", "</s>",
             "<|user|>\nabc</s>\n<|assistant|>\n");
}

static void test_errors(void) {
    expect_err("kind none", MODEL_CHAT_NONE, conv, N_CONV, BRISK_EUNSUPPORTED);
    expect_err("kind out of range", (model_chat_kind)42, conv, N_CONV, BRISK_EUNSUPPORTED);
    expect_err("no messages", MODEL_CHAT_CHATML, conv, 0, BRISK_EINVAL);
    expect_err("negative count", MODEL_CHAT_CHATML, conv, -3, BRISK_EINVAL);
    expect_err("NULL messages", MODEL_CHAT_CHATML, NULL, 2, BRISK_EINVAL);
    static const char *const bad_roles[] = {"tool",       "User",       "system\n", "",
                                            "assistant ", "<|im_end|>", "developer"};
    for (size_t i = 0; i < sizeof bad_roles / sizeof bad_roles[0]; i++) {
        const model_chat_msg m[] = {{"user", "hi", 2}, {bad_roles[i], "x", 1}};
        for (int k = MODEL_CHAT_CHATML; k <= MODEL_CHAT_PHI3; k++)
            expect_err("bad role", (model_chat_kind)k, m, 2, BRISK_EINVAL);
    }
    const model_chat_msg null_role[] = {{NULL, "x", 1}};
    expect_err("NULL role", MODEL_CHAT_LLAMA3, null_role, 1, BRISK_EINVAL);
    const model_chat_msg null_content[] = {{"user", NULL, 5}};
    expect_err("NULL content with a length", MODEL_CHAT_GEMMA, null_content, 1, BRISK_EINVAL);
    /* Embedded NUL: rejected (documented in chat_template.h). */
    const model_chat_msg nul[] = {{"user", "a\0b", 3}};
    for (int k = MODEL_CHAT_CHATML; k <= MODEL_CHAT_PHI3; k++)
        expect_err("embedded NUL", (model_chat_kind)k, nul, 1, BRISK_EINVAL);
    const model_chat_msg nul_end[] = {{"user", "ab", 3}}; /* the terminator counted */
    expect_err("counted terminator", MODEL_CHAT_CHATML, nul_end, 1, BRISK_EINVAL);

    char *out = NULL, err[128] = "";
    size_t len = 0;
    int s = 0;
    CHECK(model_chat_render(MODEL_CHAT_CHATML, conv, 1, NULL, NULL, NULL, &len, &s, err,
                            sizeof err) == BRISK_EINVAL &&
              bt_one_line(err),
          "NULL out");
    CHECK(model_chat_render(MODEL_CHAT_CHATML, conv, 0, NULL, NULL, &out, &len, &s, NULL, 0) ==
              BRISK_EINVAL,
          "err may be NULL");
    CHECK(model_chat_format_render(NULL, conv, 1, NULL, NULL, &out, &len, &s, err, sizeof err) ==
              BRISK_EUNSUPPORTED,
          "NULL format");
}

/* Random conversations in every family: rendering succeeds, the text has no
 * stray NUL, and every user/assistant content (trimmed) appears in order. */
static void test_random(void) {
    static const char alpha[] = "ab <|>\n\t[]/{}%'\"\\\xc3\xa9\xff";
    static const char *const roles[] = {"system", "user", "assistant"};
    char contents[8][24];
    model_chat_msg m[8];
    for (int it = 0; it < 400; it++) {
        int n = 1 + (int)rnd(8);
        for (int i = 0; i < n; i++) {
            size_t l = rnd(sizeof contents[i]);
            for (size_t j = 0; j < l; j++)
                contents[i][j] = alpha[rnd(sizeof alpha - 1)];
            m[i].role = roles[rnd(3)];
            m[i].content = l ? contents[i] : NULL;
            m[i].content_len = l;
        }
        for (int k = MODEL_CHAT_CHATML; k <= MODEL_CHAT_PHI3; k++) {
            char *o = render_k((model_chat_kind)k, m, n, (it & 1) ? "<s>" : NULL, "</s>", NULL);
            if (!o)
                continue;
            size_t ol = strlen(o);
            const char *at = o;
            int ok = 1;
            for (int i = 0; i < n && ok; i++) {
                /* System text may move (merged into a later turn): look for it
                 * anywhere; turns must come in order. */
                int sys = strcmp(m[i].role, "system") == 0;
                const char *from = sys ? o : at;
                size_t tl;
                const char *t = trimmed(contents[i], m[i].content_len, &tl);
                const char *hit = find_mem(from, ol - (size_t)(from - o), t, tl);
                if (!hit)
                    ok = 0;
                if (hit && !sys)
                    at = hit + tl;
            }
            CHECK(ok, "random %d, %s: contents in order", it,
                  model_chat_kind_name((model_chat_kind)k));
            free(o);
        }
    }
}

/* The real SmolLM2 GGUF: its template is recognised, its default system
 * prompt used, and the text equals the Jinja rendering worked out by hand
 * from the template in the file:
 *   {% for message in messages %}{% if loop.first and messages[0]['role'] !=
 *   'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named
 *   SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>'
 *   + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}
 *   {% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}
 *   {% endif %} */
static void test_smollm2_gguf(void) {
    char path[1024];
    const char *env = getenv("BRISK_MODEL");
    const char *home = getenv("HOME");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        snprintf(path, sizeof path, "%s/.cache/brisk/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : "");
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        printf("test_chat_template: SKIP SmolLM2 GGUF test: %s not found\n", path);
        return;
    }
    fclose(fp);
    model_load_opts o = {.weights = MODEL_WEIGHTS_AUTO, .pool = NULL};
    model *md = NULL;
    char err[256] = "";
    int rc = model_load(path, &o, &md, err, sizeof err);
    CHECK(rc == 0, "load %s: %s", path, err);
    if (rc != 0)
        return;
    const char *tmpl = model_chat_template(md);
    CHECK(tmpl != NULL, "SmolLM2 has a chat template");
    model_chat_format f;
    model_chat_format_detect(tmpl, &f);
    CHECK(f.kind == MODEL_CHAT_CHATML && (f.flags & MODEL_CHAT_F_DEFAULT_SYSTEM), "SmolLM2 format");

    const tok_vocab *v = model_get_vocab(md);
    char bos[64] = "", eos[64] = "";
    int bl = tok_token_to_piece(v, tok_bos(v), TOK_PARSE_SPECIAL, bos, sizeof bos - 1);
    int el = tok_token_to_piece(v, tok_eos(v), TOK_PARSE_SPECIAL, eos, sizeof eos - 1);
    CHECK(bl > 0 && bl < 64 && el > 0 && el < 64, "bos/eos text");
    if (bl > 0 && bl < 64)
        bos[bl] = '\0';
    if (el > 0 && el < 64)
        eos[el] = '\0';

    const model_chat_msg chat[] = {{"user", "What is the capital of France?", 30},
                                   {"assistant", "Paris.", 6},
                                   {"user", "And of Italy?", 13}};
    int swb = -1;
    char *got = render_f(&f, chat, 3, bos, eos, &swb);
    const char *want =
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
        "Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\nParis.<|im_end|>\n"
        "<|im_start|>user\nAnd of Italy?<|im_end|>\n"
        "<|im_start|>assistant\n";
    CHECK(got && strcmp(got, want) == 0, "SmolLM2 render:\n  got  [%s]\n  want [%s]",
          got ? got : "", want);
    /* Its BOS is <|im_start|>: the caller must not add another. */
    CHECK(strcmp(bos, "<|im_start|>") == 0 && swb == 1, "SmolLM2 bos [%s], starts_with_bos %d", bos,
          swb);

    /* With special-token parsing, every turn opens with the <|im_start|> token
     * and the stop string is one vocab token. */
    int32_t ids[256];
    int32_t im_start = tok_find_piece(v, "<|im_start|>", 12);
    int32_t im_end = tok_find_piece(v, "<|im_end|>", 10);
    int nt = got ? tok_encode(v, got, strlen(got), TOK_PARSE_SPECIAL, ids, 256) : -1;
    CHECK(nt > 0 && nt <= 256, "encode %d", nt);
    int n_start = 0, n_end = 0;
    for (int i = 0; i < nt && i < 256; i++) {
        n_start += ids[i] == im_start;
        n_end += ids[i] == im_end;
    }
    CHECK(nt > 0 && ids[0] == im_start && n_start == 5 && n_end == 4, "turn tokens %d/%d", n_start,
          n_end);
    const char *const *stops = model_chat_stop_strings(f.kind);
    CHECK(tok_find_piece(v, stops[0], strlen(stops[0])) == im_end && tok_is_eog(v, im_end),
          "<|im_end|> is a vocab EOG token");
    free(got);

    /* A system message replaces the default. */
    const model_chat_msg sys[] = {{"system", "Be brief.", 9}, {"user", "Hi", 2}};
    got = render_f(&f, sys, 2, bos, eos, NULL);
    CHECK(got && strcmp(got, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
                             "<|im_end|>\n<|im_start|>assistant\n") == 0,
          "SmolLM2 with system [%s]", got ? got : "");
    free(got);
    model_free(md);
}

int main(void) {
    test_real_templates();
    test_detect_details();
    test_unrecognised();
    test_names();
    test_stop_strings();
    test_canonical();
    test_lenient();
    test_empty_and_special();
    test_errors();
    test_random();
    test_smollm2_gguf();
    return BT_SUMMARY("test_chat_template");
}
