// Streams one response through the gateway with the stock openai Node SDK and prints
// what the SDK saw, as JSON: every event's type, the text, the final response.
import OpenAI from "openai";

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const stream = await client.responses.create({ model, input: "How long is 'hello'?", stream: true });
const types = [];
let text = "";
let final = null;
for await (const event of stream) {
  types.push(event.type);
  if (event.type === "response.output_text.delta") text += event.delta;
  if (event.type === "response.completed") final = event.response;
}
console.log(JSON.stringify({ types, text, final }));
