// Anthropic's TypeScript SDK against the gateway's Messages surface: a streamed answer
// whose hidden rounds ran a server tool, then the client's own tool handed back as a
// tool_use block and answered with a tool_result, whole. Prints what it saw as JSON.
import Anthropic from "@anthropic-ai/sdk";

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0 });
const weather = {
  name: "local_weather",
  description: "The weather where the user is.",
  input_schema: { type: "object", properties: { city: { type: "string" } } },
};
const streamed = client.messages.stream({
  model,
  max_tokens: 256,
  messages: [{ role: "user", content: "measure example" }],
});
let text = "";
streamed.on("text", (piece) => {
  text += piece;
});
const first = await streamed.finalMessage();
const history = [{ role: "user", content: "weather in Oslo" }];
const asked = await client.messages.create({ model, max_tokens: 256, messages: history, tools: [weather] });
const call = asked.content.find((block) => block.type === "tool_use");
history.push({ role: "assistant", content: asked.content });
history.push({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: call.id, content: "sunny" }],
});
const done = await client.messages.create({ model, max_tokens: 256, messages: history, tools: [weather] });
console.log(
  JSON.stringify({
    streamed: text,
    streamedStop: first.stop_reason,
    usage: first.usage,
    call: { id: call.id, name: call.name, input: call.input },
    askedStop: asked.stop_reason,
    answer: done.content[0].text,
  }),
);
