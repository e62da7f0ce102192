// Reads a solc standard-JSON input on stdin, writes the standard-JSON output on stdout.
// Imports resolve to this folder's node_modules (OpenZeppelin), and nothing else.
"use strict";
const fs = require("fs");
const path = require("path");
const solc = require("solc");

function findImports(importPath) {
  const resolved = path.join(__dirname, "node_modules", importPath);
  if (!resolved.startsWith(path.join(__dirname, "node_modules") + path.sep)) {
    return { error: "import outside node_modules: " + importPath };
  }
  try {
    return { contents: fs.readFileSync(resolved, "utf8") };
  } catch (err) {
    return { error: "cannot read " + importPath + ": " + err.message };
  }
}

const input = fs.readFileSync(0, "utf8");
const output = solc.compile(input, { import: findImports });
process.stdout.write(JSON.stringify({ version: solc.version(), output: JSON.parse(output) }));
