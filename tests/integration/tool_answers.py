"""Helpers for the tool-calling tests: one chat request answered whole, streamed as raw
SSE and streamed through the openai SDK, the stream's deltas checked against OpenAI's rules
for streamed calls and gathered as a client gathers them, and the three answers compared."""
import json
import re

ID = re.compile(r"^call_[A-Za-z0-9]{24}$")


def whole(srv, body):
    r = srv.post("/v1/chat/completions", dict(body, stream=False))
    assert r.status == 200, r.text
    c = r.json()["choices"][0]
    msg = c["message"]
    calls = [(t["id"], t["function"]["name"], t["function"]["arguments"])
             for t in msg.get("tool_calls") or []]
    for t in msg.get("tool_calls") or []:
        assert t["type"] == "function", t
    return {"content": msg["content"], "calls": calls, "finish": c["finish_reason"]}


class Calls:
    """Stream deltas gathered as a client does, with the delta rules checked."""

    def __init__(self):
        self.content, self.calls, self.finish = "", [], None

    def add(self, delta, finish):
        self.content += delta.get("content") or ""
        for t in delta.get("tool_calls") or []:
            fn = t.get("function") or {}
            if "id" in t:
                # A call's first delta: index, id, type, name, empty arguments; the next
                # call only after the ones before it.
                assert t["index"] == len(self.calls), (t, self.calls)
                assert t["type"] == "function" and fn.get("name") and fn["arguments"] == "", t
                self.calls.append([t["id"], fn["name"], ""])
            else:
                assert set(t) == {"index", "function"} and set(fn) == {"arguments"}, t
                assert t["index"] == len(self.calls) - 1, ("a fragment of an earlier call", t)
                self.calls[t["index"]][2] += fn["arguments"]
        if finish:
            assert self.finish is None, "two finishes"
            self.finish = finish

    def result(self):
        return {"content": self.content, "calls": [tuple(c) for c in self.calls],
                "finish": self.finish}


def streamed_raw(srv, body):
    conn, status, headers = srv.stream("/v1/chat/completions", dict(body, stream=True))
    assert status == 200
    got, done = Calls(), False
    for data in conn.iter_sse(headers):
        if data == "[DONE]":
            done = True
            continue
        ev = json.loads(data)
        assert "error" not in ev, ev
        for ch in ev["choices"]:
            got.add(ch["delta"], ch["finish_reason"])
    conn.close()
    assert done
    return got.result()


def streamed_sdk(srv, body):
    client = srv.client()
    kw = {k: v for k, v in body.items() if k not in ("model", "messages")}
    got = Calls()
    for ch in client.chat.completions.create(model=body["model"], messages=body["messages"],
                                             stream=True, **kw):
        for c in ch.choices:
            got.add(c.delta.model_dump(exclude_none=True), c.finish_reason)
    return got.result()


def same_answer(w, s, how):
    """A stream's answer equals the whole one: calls (ids of the same form), content
    (null in the whole answer is no content in the stream), finish_reason."""
    assert s["finish"] == w["finish"], (how, s, w)
    assert s["content"] == (w["content"] or ""), (how, s, w)
    assert [c[1:] for c in s["calls"]] == [c[1:] for c in w["calls"]], (how, s, w)
    for c in s["calls"] + w["calls"]:
        assert ID.match(c[0]), c


def ask_all_ways(srv, body):
    """body (a chat request with its model) whole, as raw SSE and through the SDK: the
    three answers must be the same; returns the whole one ({content, calls: [(id, name,
    arguments)], finish})."""
    w = whole(srv, body)
    same_answer(w, streamed_raw(srv, body), "raw SSE")
    same_answer(w, streamed_sdk(srv, body), "openai SDK")
    return w
