// The version handshake: the client announces its PROTOCOL_VERSION in InitializeParams.capabilities.experimental;
// the server answers with its own and its package version in InitializeResult.capabilities.experimental. On a
// mismatch the user gets one notification naming both and the command that installs the matching server into
// the configured interpreter. No vscode import: unit-tested under plain node.
import { CAPABILITY, PROTOCOL_VERSION, type ClientCapability, type ServerCapability } from './protocol';
import { shellQuote } from './python';

/** The parts of an LSP InitializeResult read here. */
export interface Introduction {
  serverInfo?: { name: string; version?: string };
  capabilities: { experimental?: unknown };
}

/** What the client adds to its capabilities (a vscode-languageclient StaticFeature puts it there). */
export function clientExperimental(experimental: unknown): Record<string, unknown> {
  const mine: ClientCapability = { protocolVersion: PROTOCOL_VERSION };
  return { ...(typeof experimental === 'object' && experimental !== null ? experimental : {}), [CAPABILITY]: mine };
}

/** The server's answer, or undefined when it announces none (older than protocol 1, or not aoti-lsp). */
export function serverCapability(result: Introduction | undefined): Partial<ServerCapability> | undefined {
  const experimental = result?.capabilities.experimental as Record<string, Partial<ServerCapability>> | undefined;
  const mine = experimental?.[CAPABILITY];
  return mine && typeof mine.protocolVersion === 'number' ? mine : undefined;
}

export function serverProtocol(result: Introduction | undefined): number | undefined {
  return serverCapability(result)?.protocolVersion;
}

export interface Handshake {
  /** A line for the output channel. */
  text: string;
  mismatch: boolean;
  /** The one notification on a mismatch. */
  notification?: string;
  /** The command that installs the server matching this extension. */
  fixCommand?: string;
}

/** `extensionVersion` is the extension's package version: the aoti-lens release it was built with. */
export function handshake(result: Introduction | undefined, extensionVersion: string, python: string): Handshake {
  const info = result?.serverInfo;
  const server = serverCapability(result);
  const theirs = server?.protocolVersion;
  const packageVersion = server?.packageVersion ?? info?.version ?? 'unknown';
  const name = info ? `${info.name}${info.version ? ` ${info.version}` : ''}` : 'the server';
  const protocol = theirs === undefined ? 'announces no protocol version' : `speaks protocol ${theirs}`;
  const text = `${name} ${protocol}; this extension (${extensionVersion}) speaks ${PROTOCOL_VERSION}`;
  if (theirs === PROTOCOL_VERSION) return { text, mismatch: false };
  const fixCommand = `${shellQuote(python)} -m pip install ${shellQuote(`aoti-lens==${extensionVersion}`)}`;
  const serverSide = `aoti-lens ${packageVersion}, protocol ${theirs ?? 'unknown (older than 1)'}`;
  const notification =
    `aoti-lens: the language server in ${python} (${serverSide}) does not match this extension ` +
    `(aoti-lens ${extensionVersion}, protocol ${PROTOCOL_VERSION}). Install the matching server: ${fixCommand}` +
    (theirs !== undefined && theirs > PROTOCOL_VERSION ? ` (or update the extension to aoti-lens ${packageVersion})` : '');
  return { text, mismatch: true, notification, fixCommand };
}
