// s3rver for the tests, in a process of its own: it encrypts ListObjectsV2 continuation
// tokens with DES, which Node 20's OpenSSL 3 offers only under --openssl-legacy-provider.
// Prints {"port": N} once listening; exits when its parent closes stdin (or dies).
import S3rver from "s3rver";

const [directory, bucket] = process.argv.slice(2);
const server = new S3rver({
  port: 0,
  address: "127.0.0.1",
  directory,
  silent: true,
  configureBuckets: [{ name: bucket }],
});
const { port } = await server.run();
process.stdout.write(`${JSON.stringify({ port })}\n`);
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
