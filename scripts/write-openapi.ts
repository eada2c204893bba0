// Writes docs/openapi.json from the route schemas (`make openapi`).
import { writeFile } from "node:fs/promises";
import { openApiDocumentText } from "./openapi-document.js";

await writeFile(new URL("../docs/openapi.json", import.meta.url), await openApiDocumentText());
process.stdout.write("wrote docs/openapi.json\n");
process.exit(0);
