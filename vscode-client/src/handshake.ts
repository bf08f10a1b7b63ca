// What the server says of itself at `initialize`: its name, version and PROTOCOL_VERSION (announced in
// capabilities.experimental). Today the client logs it; issue 16's version handshake grows from here.
// No vscode import: unit-tested under plain node.
import { CAPABILITY, PROTOCOL_VERSION, type ServerCapability } from './protocol';

/** The parts of an LSP InitializeResult read here. */
export interface Introduction {
  serverInfo?: { name: string; version?: string };
  capabilities: { experimental?: unknown };
}

/** The server's PROTOCOL_VERSION, or undefined when it announces none (older than version 1, or not aoti-lsp). */
export function serverProtocol(result: Introduction | undefined): number | undefined {
  const experimental = result?.capabilities.experimental as Record<string, Partial<ServerCapability>> | undefined;
  const version = experimental?.[CAPABILITY]?.protocolVersion;
  return typeof version === 'number' ? version : undefined;
}

/** A line for the output channel, and whether the two sides speak different protocol versions. */
export function describeServer(result: Introduction | undefined): { text: string; mismatch: boolean } {
  const info = result?.serverInfo;
  const name = info ? `${info.name}${info.version ? ` ${info.version}` : ''}` : 'the server';
  const theirs = serverProtocol(result);
  const mismatch = theirs !== PROTOCOL_VERSION;
  const protocol = theirs === undefined ? 'announces no protocol version' : `speaks protocol ${theirs}`;
  return { text: `${name} ${protocol}; this extension speaks ${PROTOCOL_VERSION}`, mismatch };
}
