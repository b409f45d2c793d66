"""Published chat templates rendered by the lab (marin.posttrain.chat_template) exactly as `transformers`'
`apply_chat_template` renders them: same text, same token ids, and the assistant mask of `{% generation %}` templates.
The hub is offline, so the templates are written here as they are published (each cites its model), and the
tokenizer is a small byte-level BPE with the templates' special tokens, loaded into `PreTrainedTokenizerFast`."""

import json

import numpy as np
import pytest

# meta-llama/Llama-3.1-8B-Instruct, tokenizer_config.json "chat_template"
LLAMA31 = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# Qwen/Qwen2.5-7B-Instruct (the whole Qwen2.5 instruct family), tokenizer_config.json "chat_template"
QWEN25 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# google/gemma-3-4b-it (and gemma-3-270m-it): the library keeps it (a GGUF file may carry none)
from marin.posttrain.chat_template import GEMMA3_CHAT_TEMPLATE as GEMMA3

# HuggingFaceTB/SmolLM2-135M-Instruct (ChatML with a default system prompt), tokenizer_config.json "chat_template"
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# The same with the assistant's text in {% generation %} tags (the form TRL's assistant-only loss asks for)
SMOLLM2_TAGGED = SMOLLM2.replace(
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}",
    "{{'<|im_start|>' + message['role'] + '\n'}}{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{% else %}{{ message['content'] + '<|im_end|>' }}"
    "{% endif %}{{ '\n' }}",
)

# name: (template, special tokens, the end-of-turn text after an assistant reply, whether the template trims content)
TEMPLATES = {
    "llama3.1": (LLAMA31, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, "<|eot_id|>", True),
    "qwen2.5": (QWEN25, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, "<|im_end|>", False),
    "gemma3": (GEMMA3, {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}, "<end_of_turn>", True),
    "smollm2": (SMOLLM2, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}, "<|im_end|>", False),
    "smollm2-tagged": (SMOLLM2_TAGGED, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}, "<|im_end|>", False),
}
SPECIALS = [
    "<|endoftext|>", "<|pad|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<|im_start|>", "<|im_end|>", "<bos>", "<eos>", "<pad>", "<start_of_turn>", "<end_of_turn>",
]  # fmt: skip

S = {"role": "system", "content": "You are terse.  "}
U1 = {"role": "user", "content": "What is 2+2?\nAnswer in words."}
A1 = {"role": "assistant", "content": " Four. "}
U2 = {"role": "user", "content": "naïve café — 東京 <b>&</b>"}
A2 = {"role": "assistant", "content": 'Tokyo, "quoted"\n\nand a new paragraph.'}
CONVERSATIONS = [[S, U1, A1], [U1, A1], [S, U1, A1, U2, A2], [U1, A1, U2, A2]]


@pytest.fixture(scope="module")
def bpe():
    from marin.data.tokenizers import train_bpe

    texts = [m["content"] for c in CONVERSATIONS for m in c] + [t for t, *_ in TEMPLATES.values()]
    return train_bpe(texts * 3, 400, special_tokens=SPECIALS)


def _hf(bpe, name):
    import transformers

    src, special, *_ = TEMPLATES[name]
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe.tok, chat_template=src, **special)


def _ours(name):
    from marin.posttrain.chat_template import JinjaChatTemplate

    src, special, *_ = TEMPLATES[name]
    return JinjaChatTemplate(src, tuple(special.items()), origin=name)


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_same_text_and_ids_as_transformers(bpe, name):
    from marin.posttrain.chat_template import token_offsets

    hf, ours = _hf(bpe, name), _ours(name)
    for conv in CONVERSATIONS:
        for msgs, agp in ((conv, False), (conv[:-1], True), (conv[:-1], False)):
            want = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=agp)
            assert ours.render(msgs, add_generation_prompt=agp) == want
            ids = hf.apply_chat_template(msgs, tokenize=True, add_generation_prompt=agp, return_dict=True)["input_ids"]
            assert token_offsets(bpe, want)[0].tolist() == list(ids)
            assert bpe.encode(want).tolist() == list(ids)
        ids, tgt = ours.encode(bpe, conv)
        assert ids.tolist() == list(hf.apply_chat_template(conv, tokenize=True, return_dict=True)["input_ids"])


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_assistant_tokens(bpe, name):
    "The targets are exactly the replies and their end-of-turn token (trimmed where the template trims)."
    _, _, end, trims = TEMPLATES[name]
    ours = _ours(name)
    for conv in CONVERSATIONS:
        ids, tgt = ours.encode(bpe, conv)
        replies = [m["content"].strip() if trims else m["content"] for m in conv if m["role"] == "assistant"]
        assert bpe.decode(ids[tgt == 1]) == "".join(r + end for r in replies)
        assert tgt[-1] == (0 if name.startswith(("qwen", "smol", "gemma")) else 1)  # the "\n" after the end token


def test_generation_tags_mask_is_transformers_and_prefix_diff_agrees(bpe):
    hf, tagged, plain = _hf(bpe, "smollm2-tagged"), _ours("smollm2-tagged"), _ours("smollm2")
    assert tagged.has_generation_tags and not plain.has_generation_tags
    for conv in CONVERSATIONS:
        out = hf.apply_chat_template(conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        ids, tgt = tagged.encode(bpe, conv)
        assert ids.tolist() == list(out["input_ids"]) and tgt.tolist() == list(out["assistant_masks"])
        assert tgt.sum() > 0
        ids2, tgt2 = plain.encode(bpe, conv)  # no tags: found by rendering prefixes
        assert ids2.tolist() == ids.tolist() and tgt2.tolist() == tgt.tolist()


def test_bad_templates_name_their_source():
    from marin.posttrain.chat_template import ChatTemplateError, JinjaChatTemplate

    with pytest.raises(ChatTemplateError, match=r"ckpt/tokenizer_config.json: .*not valid Jinja \(line 2"):
        JinjaChatTemplate("{% for m in messages %}\n{{ m.content }", origin="ckpt/tokenizer_config.json").render([U1])
    gemma = _ours("gemma3")
    with pytest.raises(ChatTemplateError, match=r"gemma3: .*roles \['user', 'user'\].*must alternate"):
        gemma.render([U1, U2])
    # a template that renders a conversation's start unlike its prefix cannot give a mask by prefix rendering
    odd = JinjaChatTemplate("{% for m in messages %}{{ m.content if loop.last else '-' }}{% endfor %}", origin="odd")
    with pytest.raises(ChatTemplateError, match=r"odd: message 1 \(assistant\).*generation"):
        odd.encode(None, [U1, A1, U2])


def test_template_from_a_saved_tokenizer_folder(bpe, tmp_path):
    "A folder `save_pretrained` wrote (what the import step copies) renders as `AutoTokenizer` loads it."
    import transformers
    from marin.posttrain.chat_template import load_hf_chat_template
    from marin.posttrain.sft import resolve_tokenizer

    for name in ("llama3.1", "gemma3"):
        d = tmp_path / name
        _hf(bpe, name).save_pretrained(d)
        hf = transformers.PreTrainedTokenizerFast.from_pretrained(d)
        ours, tok = load_hf_chat_template(str(d)), resolve_tokenizer(str(d))
        assert ours.source == TEMPLATES[name][0] and dict(ours.special_tokens)["bos_token"] == hf.bos_token
        for conv in CONVERSATIONS:
            want = hf.apply_chat_template(conv, tokenize=True, return_dict=True)["input_ids"]
            assert ours.encode(tok, conv)[0].tolist() == list(want)
    # the older layout: the template inside tokenizer_config.json
    d = tmp_path / "legacy"
    d.mkdir()
    bpe.save(str(d))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": QWEN25, "eos_token": "<|im_end|>"}))
    hf = transformers.PreTrainedTokenizerFast.from_pretrained(d)
    assert load_hf_chat_template(str(d)).render(CONVERSATIONS[1]) == hf.apply_chat_template(
        CONVERSATIONS[1], tokenize=False
    )
    assert np.array_equal(
        load_hf_chat_template(str(d)).encode(bpe, CONVERSATIONS[1])[0],
        bpe.encode(hf.apply_chat_template(CONVERSATIONS[1], tokenize=False)),
    )


def test_messages_and_globals_as_transformers(bpe):
    "None values dropped, reasoning under both names, strftime_now, tojson without HTML escapes, loop controls."
    import transformers

    src = (
        "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{{ m.role }}|{{ m.reasoning_content }}|"
        "{{ m.thinking }}|{{ 'content' in m }}|{{ m | tojson(indent=1) }}\n{% endfor %}{{ strftime_now('%Y-%m-%d') }}"
        "{{ bos_token }}{{ tools is none }}{{ documents is none }}"
    )
    msgs = [{"role": "user", "content": "<a & 'b'> é"}, {"role": "assistant", "content": None, "reasoning": "hmm"}, U1]
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe.tok, chat_template=src, bos_token="<bos>")
    from marin.posttrain.chat_template import JinjaChatTemplate

    ours = JinjaChatTemplate(src, (("bos_token", "<bos>"),)).render(msgs)
    assert ours == hf.apply_chat_template(msgs, tokenize=False) and "hmm|hmm|False" in ours and "é" in ours
