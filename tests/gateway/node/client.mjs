// A Node agent using the official `openai` npm package with its baseURL at the gateway:
// one plain call and one streamed call per history length given on stdin (JSON).
import OpenAI from "openai";

const [baseURL] = process.argv.slice(2);
const histories = JSON.parse(await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (c) => (data += c));
  process.stdin.on("end", () => resolve(data));
}));
const client = new OpenAI({ baseURL, apiKey: "node-tenant-key", maxRetries: 0 });
const out = [];
for (const messages of histories) {
  const plain = await client.chat.completions.create({ model: "m", messages });
  const stream = await client.chat.completions.create({ model: "m", messages, stream: true });
  let text = "";
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    text += chunk.choices[0]?.delta?.content ?? "";
  }
  out.push({ plain: plain.choices[0].message.content, streamed: text, chunks });
}
process.stdout.write(JSON.stringify(out));
