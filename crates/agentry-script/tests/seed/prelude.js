// What the seed's examples call but do not define. `process` takes a few milliseconds per item
// and reports each one, so that a test can cancel mid-loop on a progress event.
const items = Array.from({ length: 2000 }, (_, i) => `item ${i + 1}`);
let processedCount = 0;
async function process(item) {
  await new Promise((resolve) => setTimeout(resolve, 2));
  processedCount += 1;
  AssistantTool.report(`processed ${processedCount}`);
  return `processed ${item}`;
}
async function doSomethingSlow() {
  AssistantTool.report("slow work started");
  await new Promise((resolve) => setTimeout(resolve, 600000));
}
function formatPartialResult(partial) {
  return ["Cancelled by the user. Partial results:", ...partial].join("\n");
}
function formatFinalResult(partial) {
  return `All ${partial.length} items processed.`;
}
