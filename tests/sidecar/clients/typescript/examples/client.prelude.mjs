// Prelude of TYPESCRIPT.md's client example: what it leaves to the reader.
const read = async (path) => `contents of ${path}`;
