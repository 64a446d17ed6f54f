// The official OpenAI Node SDK (npm `openai`, v6) against a live `gemmakit serve`
// (run by openai_sdk_test.sh through with_server.py: GK_BASE_URL, GK_MODEL, GK_API_KEY).
"use strict";
const assert = require("node:assert/strict");
const OpenAI = require("openai");

const model = process.env.GK_MODEL;
const client = new OpenAI({
  baseURL: `${process.env.GK_BASE_URL}/v1`,
  apiKey: process.env.GK_API_KEY || "unused",
  maxRetries: 0,
  timeout: 120 * 1000,
});

async function main() {
  // models.list()
  const models = await client.models.list();
  const ids = models.data.map((m) => m.id);
  assert.ok(ids.includes(model), `models.list: ${JSON.stringify(ids)}`);
  console.log(`ok: models.list -> ${ids.join(", ")}`);

  // A streamed chat completion with stream_options.include_usage.
  const chat = {
    model,
    messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Write a Verilog counter." }],
    max_tokens: 24,
    temperature: 0,
    ignore_eos: true,
  };
  const stream = await client.chat.completions.create({ ...chat, stream: true, stream_options: { include_usage: true } });
  let text = "";
  let usage = null;
  let first = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    if (!first) first = chunk;
    text += chunk.choices[0].delta?.content ?? "";
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.ok(usage, "the usage chunk arrived");
  assert.equal(usage.completion_tokens, 24);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.equal(first.choices[0].delta.role, "assistant");
  assert.equal(finish, "length");
  assert.ok(text.length > 0, "text reassembled");
  const full = await client.chat.completions.create(chat);
  assert.equal(full.choices[0].message.content, text, "streamed text == non-streamed text (greedy)");
  console.log(`ok: streamed chat (${usage.completion_tokens} tokens, usage chunk, same text as non-streamed)`);

  // A completion with ignore_eos (an extra body field) returns exactly max_tokens tokens.
  const c = await client.completions.create({ model, prompt: "module adder(", max_tokens: 32, temperature: 0.8, seed: 3, ignore_eos: true });
  assert.equal(c.usage.completion_tokens, 32);
  assert.equal(c.choices[0].finish_reason, "length");
  assert.ok(c.id.startsWith("cmpl-"));
  console.log("ok: completion with ignore_eos -> exactly max_tokens tokens");

  // Streamed completion.
  const cs = await client.completions.create({ model, prompt: "module adder(", max_tokens: 8, temperature: 0, ignore_eos: true, stream: true });
  let ctext = "";
  for await (const chunk of cs) ctext += chunk.choices[0]?.text ?? "";
  const cfull = await client.completions.create({ model, prompt: "module adder(", max_tokens: 8, temperature: 0, ignore_eos: true });
  assert.equal(ctext, cfull.choices[0].text);
  console.log("ok: streamed completion");

  // Tools and a whole tool round trip (assistant tool_calls, a tool result) through the
  // checkpoint's own chat template (the one `gemmakit init` writes), thinking on.
  const tools = [{
    type: "function",
    function: {
      name: "get_weather", description: "Current weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] },
    },
  }];
  const history = [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }] },
    { role: "tool", tool_call_id: "call_1", content: "sunny, 21 C" },
  ];
  const toolChat = { model, messages: history, tools, max_tokens: 8, temperature: 0, chat_template_kwargs: { enable_thinking: true } };
  const tr = await client.chat.completions.create(toolChat);
  const msg = tr.choices[0].message;
  assert.ok(Array.isArray(msg.tool_calls), JSON.stringify(msg));
  assert.ok("reasoning_content" in msg, JSON.stringify(msg));
  assert.ok(["stop", "length", "tool_calls"].includes(tr.choices[0].finish_reason));
  for (const call of msg.tool_calls) JSON.parse(call.function.arguments);  // arguments are JSON text
  let streamed = "";
  for await (const chunk of await client.chat.completions.create({ ...toolChat, stream: true })) {
    const d = chunk.choices[0]?.delta ?? {};
    streamed += (d.reasoning_content ?? "") + (d.content ?? "");
    for (const t of d.tool_calls ?? []) assert.equal(typeof t.index, "number");
  }
  // The template declared the tool: the same chat without tools is shorter.
  const tokenize = async (body) => {
    const res = await fetch(`${process.env.GK_BASE_URL}/tokenize`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${process.env.GK_API_KEY || "unused"}` },
      body: JSON.stringify({ model, ...body }),
    });
    assert.equal(res.status, 200);
    return (await res.json()).count;
  };
  const withTools = await tokenize({ messages: history, tools });
  const withoutTools = await tokenize({ messages: history });
  assert.ok(withTools > withoutTools, `tokenize: ${withTools} tokens with tools, ${withoutTools} without`);
  await assert.rejects(client.chat.completions.create({ ...toolChat, tool_choice: "required" }), (e) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /required/);
    return true;
  });
  console.log(`ok: tools, tool calls and results, thinking (${withTools} vs ${withoutTools} prompt tokens; finish ${tr.choices[0].finish_reason})`);

  // Errors come back as APIError with the status and the OpenAI error body.
  await assert.rejects(client.completions.create({ model, prompt: "x", max_tokens: -1 }), (e) => {
    assert.ok(e instanceof OpenAI.APIError, String(e));
    assert.equal(e.status, 400);
    assert.match(e.message, /max_tokens/);
    return true;
  });
  await assert.rejects(client.chat.completions.create({ ...chat, model: "no-such-model" }), (e) => {
    assert.equal(e.status, 404);
    assert.match(e.message, /does not exist/);
    return true;
  });
  if (process.env.GK_API_KEY) {
    const bad = new OpenAI({ baseURL: `${process.env.GK_BASE_URL}/v1`, apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e.status === 401);
  }
  console.log("ok: errors (400, 404, 401) as APIError");
  console.log("openai sdk: PASS");
}

main().catch((e) => {
  console.error("FAIL:", e);
  process.exit(1);
});
