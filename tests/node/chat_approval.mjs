// A chat client approving a held call with the stock openai Node SDK: it offers the
// gateway's toolgate_approval tool, approves what comes back as a call of it, and
// prints, as JSON, that call and the final answer.
import OpenAI from "openai";

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const tools = [
  {
    type: "function",
    function: {
      name: "toolgate_approval",
      description: "Ask the user to approve a tool call.",
      parameters: { type: "object", properties: {} },
    },
  },
];
const messages = [{ role: "user", content: "Refund order 42." }];
const first = await client.chat.completions.create({ model, messages, tools });
const asked = first.choices[0].message;
const call = asked.tool_calls[0];
messages.push(asked);
messages.push({
  role: "tool",
  tool_call_id: call.id,
  content: JSON.stringify({ approve: true, reason: "the customer asked" }),
});
const final = await client.chat.completions.create({ model, messages, tools });
console.log(
  JSON.stringify({
    finish: first.choices[0].finish_reason,
    call,
    answer: final.choices[0].message.content,
  }),
);
