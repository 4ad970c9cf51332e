// Is the listener this user's service? Checked before a byte is sent (params, results, a token), with the
// rules of every loopwarden client (`loopwarden.hooks.service`, the OpenClaw plugin; SIDECAR.md, "Security"):
// over a Unix socket, its folder is this user's (or root's) and writable by no one else, and the socket file
// is this user's (Node cannot read a socket peer's uid, so the file's owner stands for it); over loopback TCP
// on Linux, the listening socket's owner in /proc/net/tcp is this user or root. A listener that cannot be
// checked (TCP beyond loopback, no /proc) is used, but its text is not shown to a model (`fieldText`).

import { lstatSync, readFileSync } from "node:fs";
import { dirname } from "node:path";

const FIELD_TEXT = {
  warn: "Warning: this looks like a tool-call loop",
  block: "Tool call blocked by loop detection",
  abort: "CRITICAL: run aborted by loop detection",
};

/** A verdict's text from its fields alone, for a service whose own text cannot be trusted. */
export function fieldText(action, detector, count) {
  const text = FIELD_TEXT[action] ?? FIELD_TEXT.block;
  const parts = [];
  if (typeof detector === "string" && /^[A-Za-z_]{1,64}$/.test(detector)) parts.push(detector);
  if (Number.isInteger(count) && count > 0 && count <= 1_000_000) parts.push(`${count} calls`);
  return parts.length ? `${text} (${parts.join(", ")}).` : `${text}.`;
}

function untrusted(message) {
  return Object.assign(new Error(message), { code: "UNTRUSTED" });
}

function trustedUid(uid) {
  return uid === 0 || uid === process.getuid?.();
}

/** Throws unless `path`'s folder and the socket in it are this user's (or root's) and no one else may write the folder. */
export function checkSocket(path) {
  const folder = lstatSync(dirname(path));
  if (!folder.isDirectory() || !trustedUid(folder.uid) || folder.mode & 0o022) {
    throw untrusted(`the socket's folder ${dirname(path)} is not this user's alone`);
  }
  const sock = lstatSync(path);
  if (!sock.isSocket() || !trustedUid(sock.uid)) throw untrusted(`${path} is not this user's socket`);
}

function hexAddress(host, port) {
  const p = port.toString(16).toUpperCase().padStart(4, "0");
  if (host === "::1") return [`${"0".repeat(24)}01000000:${p}`, `${"0".repeat(32)}:${p}`];
  const ip = host.split(".").map((n) => Number(n).toString(16).toUpperCase().padStart(2, "0")).reverse().join("");
  return [`${ip}:${p}`, `00000000:${p}`, `${"0".repeat(32)}:${p}`];
}

/**
 * Who listens on `host:port`: true (this user or root), throws (another user's, or none of this user's),
 * null (not loopback, or /proc/net/tcp cannot be read: usable, but its text is not shown to a model).
 */
export function checkTcpListener(host, port, readFile = readFileSync) {
  if (!(host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host) || host === "localhost")) return null;
  const wanted = new Set(hexAddress(host === "localhost" ? "127.0.0.1" : host, port));
  let readable = false;
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text;
    try {
      text = readFile(table, "ascii");
    } catch {
      continue;
    }
    readable = true;
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 7 && f[3] === "0A" && wanted.has(f[1])) {
        if (trustedUid(Number(f[7]))) return true;
        throw untrusted(`${host}:${port} is listened on by uid ${f[7]}, not this user`);
      }
    }
  }
  if (!readable) return null;
  throw Object.assign(new Error(`nothing of this user's listens on ${host}:${port}`), { code: "ECONNREFUSED" });
}
