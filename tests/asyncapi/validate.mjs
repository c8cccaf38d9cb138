// Validates an AsyncAPI document with the official parser (@asyncapi/parser): exits 1 and
// prints every error when it is invalid, 0 when it parses without errors. Warnings and hints
// are printed too but do not fail. Usage: node validate.mjs FILE
import { readFileSync } from "node:fs";
import { Parser, DiagnosticSeverity } from "@asyncapi/parser";

const file = process.argv[2];
if (!file) {
  console.error("usage: node validate.mjs FILE");
  process.exit(2);
}
const parser = new Parser();
const { document, diagnostics } = await parser.parse(readFileSync(file, "utf8"), { source: file });
const errors = diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error);
for (const d of diagnostics) {
  const level = ["error", "warning", "info", "hint"][d.severity] ?? String(d.severity);
  console.log(`${level} ${d.code} ${d.path.join(".")}: ${d.message}`);
}
if (errors.length > 0 || document === undefined) {
  console.error(`invalid: ${errors.length} error(s)`);
  process.exit(1);
}
console.log(`valid AsyncAPI ${document.version()}: ${document.channels().length} channels, ` +
  `${document.operations().length} operations, ${document.messages().length} messages`);
