// ollama-js against the gateway's Ollama surface: a streamed chat whose hidden rounds ran
// a server tool, then the client's own tool handed back as message.tool_calls and
// answered by its name, whole. Prints what it saw as JSON.
import { Ollama } from "ollama";

const [host, apiKey, model] = process.argv.slice(2);
const ollama = new Ollama({ host, headers: { Authorization: `Bearer ${apiKey}` } });
const weather = {
  type: "function",
  function: {
    name: "local_weather",
    description: "The weather where the user is.",
    parameters: { type: "object", properties: { city: { type: "string" } } },
  },
};
let streamed = "";
let last = null;
for await (const part of await ollama.chat({
  model,
  messages: [{ role: "user", content: "measure example" }],
  stream: true,
})) {
  streamed += part.message.content;
  last = part;
}
const history = [{ role: "user", content: "weather and length" }];
const asked = await ollama.chat({ model, messages: history, tools: [weather] });
history.push(asked.message);
history.push({ role: "tool", content: "sunny", tool_name: "local_weather" });
const done = await ollama.chat({ model, messages: history, tools: [weather] });
console.log(
  JSON.stringify({
    streamed,
    done: last.done,
    evalCount: last.eval_count,
    calls: asked.message.tool_calls,
    answer: done.message.content,
  }),
);
