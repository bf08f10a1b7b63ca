// The language client's life: pick and probe the interpreter, start `python -m server` with the
// settings as initializationOptions, push settings changes, restart on demand (serialized), and
// route the server's failure list to the view and the view's commands to the server.
import * as os from 'node:os';
import * as readline from 'node:readline';
import * as vscode from 'vscode';
import {
  CloseAction,
  DidChangeConfigurationNotification,
  ErrorAction,
  LanguageClient,
  RevealOutputChannelOn,
  State,
  TransportKind,
  type ErrorHandler,
  type LanguageClientOptions,
  type ServerOptions,
  type StaticFeature,
} from 'vscode-languageclient/node';
import { runCapture, serverCommands } from './commands';
import type { FailuresView } from './failuresView';
import { clientExperimental, handshake } from './handshake';
import { Contexts, NAME } from './manifest';
import { FileCommands, Methods, SCHEME, SETTINGS_SECTION, type FailureList, type Settings } from './protocol';
import {
  PYTHON_EXTENSION_ID,
  PythonExtension,
  installCommand,
  probeInterpreter,
  probeProblem,
  resolveInterpreter,
  type Interpreter,
  type PythonExtensionApi,
} from './python';
import { ServerProblems } from './serverProblems';
import { buildSettings, configurationAnswer, type Vars } from './settings';

/**
 * vscode-languageclient pops its own "couldn't create connection" / "connection closed" errors on
 * top of ours; ServerProblems shows one actionable notification per problem, so the client's own
 * errors only go to the output channel.
 */
class AotiLanguageClient extends LanguageClient {
  override error(message: string, data?: unknown): void {
    super.error(message, data, false);
  }
}

function workspaceVars(folder?: vscode.Uri): Vars {
  return { workspaceFolder: (folder ?? vscode.workspace.workspaceFolders?.[0]?.uri)?.fsPath, home: os.homedir() };
}

/** The handshake's client half: announce this extension's protocol version in `initialize`. */
const announceProtocol: StaticFeature = {
  fillClientCapabilities: (capabilities) => {
    capabilities.experimental = clientExperimental(capabilities.experimental);
  },
  initialize: () => undefined,
  getState: () => ({ kind: 'static' }),
  clear: () => undefined,
};

/** The shrink picture is Markdown: open it rendered. */
function isMarkdownDocument(uri: string): boolean {
  return uri.startsWith(`${SCHEME}:`) && uri.endsWith('.md');
}

function serverOptions(python: string, cwd: string): ServerOptions {
  return {
    command: python,
    args: ['-m', 'server'],
    transport: TransportKind.stdio, // the client appends --stdio
    options: { cwd, env: { ...process.env, PYTHONUNBUFFERED: '1' } },
  };
}

export class Server implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private interpreter: Interpreter | undefined;
  private starting: Promise<void> | undefined;
  private stderrTail: string[] = []; // the server's last output lines, for the "it exited" message
  private readonly problems: ServerProblems;
  private readonly pythonExtension = new PythonExtension(
    () => vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION_ID),
    () => {
      if (this.interpreter?.source !== 'setting') void this.restart();
    },
  );

  /** `cwd` is neutral (the extension's folder): `-m server` and the probe put the cwd on sys.path. */
  constructor(
    private readonly cwd: string,
    private readonly extensionVersion: string,
    private readonly output: vscode.LogOutputChannel,
    private readonly view: FailuresView,
  ) {
    this.problems = new ServerProblems(view, output, () => this.restart());
  }

  restart(): Promise<void> {
    // Serialize: a restart waits for a start in progress instead of racing it.
    const previous = this.starting;
    this.starting = (async () => {
      await previous?.catch(() => undefined);
      await this.stop();
      await this.start();
    })();
    return this.starting;
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    void vscode.commands.executeCommand('setContext', Contexts.serverRunning, false);
    if (!client) return;
    try {
      if (client.state !== State.Stopped) await client.stop(5000);
    } catch (e) {
      this.log(`stopping the server: ${String(e)}`);
    }
  }

  dispose(): void {
    this.pythonExtension.dispose();
  }

  settingsChanged(e: vscode.ConfigurationChangeEvent): void {
    if (e.affectsConfiguration(`${SETTINGS_SECTION}.python`)) void this.restart();
    else if (e.affectsConfiguration(SETTINGS_SECTION)) this.sendSettings();
  }

  sendSettings(): void {
    const client = this.running();
    client
      ?.sendNotification(DidChangeConfigurationNotification.type, { settings: { [SETTINGS_SECTION]: this.settings() } })
      .catch((e) => this.log(`didChangeConfiguration failed: ${String(e)}`));
  }

  async refresh(): Promise<void> {
    const client = this.running();
    if (!client) return;
    try {
      this.show(await client.sendRequest<FailureList | undefined>(Methods.failures, {}));
    } catch (e) {
      this.log(`${Methods.failures} failed: ${String(e)}`);
    }
  }

  private show(list: FailureList | undefined): void {
    this.view.update(list?.failures ?? []);
  }

  private running(): LanguageClient | undefined {
    return this.client?.state === State.Running ? this.client : undefined;
  }

  private settings(): Settings {
    const config = vscode.workspace.getConfiguration(SETTINGS_SECTION);
    return buildSettings(config, this.interpreter?.command, vscode.workspace.isTrusted, workspaceVars());
  }

  /** A workspace folder's settings (the server pulls them per folder): its own aoti.* and its interpreter. */
  private async folderSettings(scopeUri: string | undefined): Promise<Settings> {
    if (!scopeUri) return this.settings();
    const folder = vscode.Uri.parse(scopeUri);
    const config = vscode.workspace.getConfiguration(SETTINGS_SECTION, folder);
    const python = await resolveInterpreter(config.get<string>('python'), () => this.pythonExtension.interpreter(folder), workspaceVars(folder));
    const command = python.source === 'default' ? this.interpreter?.command : python.command;
    return buildSettings(config, command, vscode.workspace.isTrusted, workspaceVars(folder));
  }

  private async start(): Promise<void> {
    this.problems.reset();
    const python = await this.checkedInterpreter();
    if (python) await this.launch(this.createClient(python), python);
  }

  /** The interpreter to run the server with, or undefined (after saying why) when it cannot. */
  private async checkedInterpreter(): Promise<string | undefined> {
    const setting = vscode.workspace.getConfiguration(SETTINGS_SECTION).get<string>('python');
    const resource = vscode.workspace.workspaceFolders?.[0]?.uri;
    this.interpreter = await resolveInterpreter(setting, () => this.pythonExtension.interpreter(resource), workspaceVars());
    const python = this.interpreter.command;
    this.log(`interpreter: ${python} (from ${this.interpreter.source})`);
    const probe = await probeInterpreter(python, this.cwd);
    const problem = probeProblem(python, probe);
    if (problem) {
      const missing = probe.status === 'no-server';
      this.log(problem);
      this.problems.down(`${python}: ${missing ? 'aoti-lens not installed' : probe.detail}`);
      void this.problems.notify(problem, missing ? installCommand(python, 'server') : undefined);
      return undefined;
    }
    this.log(`${probe.executable} (Python ${probe.version}): server ok, torch ${probe.torch ? 'found' : 'missing'}`);
    if (!probe.torch) this.problems.noTorch(python);
    return python;
  }

  private createClient(python: string): LanguageClient {
    this.stderrTail = [];
    const client: LanguageClient = new AotiLanguageClient(
      NAME,
      NAME,
      serverOptions(python, this.cwd),
      this.clientOptions(this.errorHandler(python, () => client.state === State.Running)),
    );
    client.registerFeature(announceProtocol);
    client.onNotification(Methods.failuresChanged, (list: FailureList | undefined) => this.show(list));
    return client;
  }

  private clientOptions(errorHandler: ErrorHandler): LanguageClientOptions {
    const logLines = (input: NodeJS.ReadableStream) =>
      readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on('line', (line) => {
        this.stderrTail = [...this.stderrTail.slice(-19), line];
        this.output.info(line);
      });
    return {
      stdioOptions: { stdout: logLines, stderr: logLines },
      documentSelector: [
        { scheme: 'file', language: 'python' },
        { scheme: 'file', language: 'cpp' },
        { scheme: SCHEME },
      ],
      outputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: this.settings(),
      initializationFailedHandler: (error) => {
        this.log(`initialize failed: ${String(error)}`);
        return false; // do not retry
      },
      errorHandler,
      middleware: {
        executeCommand: async (command, args, next) => {
          // Capture runs in a terminal the user sees, with the command line the server gives.
          if (command === FileCommands.capture) return this.client && runCapture(this.client, args);
          return serverCommands(this.view, (text) => this.log(text))(command, args, next);
        },
        workspace: {
          configuration: async (params, token, next) => {
            const answer = await next(params, token);
            const settings = await Promise.all(params.items.map((item) => this.folderSettings(item.scopeUri)));
            return configurationAnswer(answer, params.items, settings);
          },
        },
        window: {
          showDocument: async (params, token, next) => {
            if (!isMarkdownDocument(params.uri)) return next(params, token);
            await vscode.commands.executeCommand('markdown.showPreview', vscode.Uri.parse(params.uri));
            return { success: true };
          },
        },
      },
    };
  }

  private errorHandler(python: string, wasRunning: () => boolean): ErrorHandler {
    return {
      error: (error, _message, count) => {
        this.log(`connection error (${count ?? 0}): ${String(error)}`);
        return { action: (count ?? 0) <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown, handled: true };
      },
      closed: () => {
        const last = this.stderrTail.filter((l) => l.trim()).slice(-1)[0];
        this.problems.down(last ? `exited: ${last}` : 'the server process exited');
        // A crash after a good start may be worth a restart; a start that failed would fail again.
        void this.problems.notify(
          `aoti-lens: the language server (${python} -m server) exited${last ? `: ${last.slice(0, 300)}` : ''}. See the output channel "${NAME}".`,
          undefined,
          wasRunning(),
        );
        return { action: CloseAction.DoNotRestart, handled: true };
      },
    };
  }

  private async launch(client: LanguageClient, python: string): Promise<void> {
    this.client = client;
    try {
      await client.start();
    } catch (e) {
      if (this.client === client) this.client = undefined;
      const text = e instanceof Error ? e.message : String(e);
      this.log(`start failed: ${text}`);
      this.problems.down(text);
      void this.problems.notify(`aoti-lens: the language server did not start with ${python}: ${text}`);
      await client.dispose(2000).catch(() => undefined); // already down
      return;
    }
    const versions = handshake(client.initializeResult, this.extensionVersion, python);
    if (versions.mismatch) {
      this.output.warn(`[client] ${versions.text}`);
      void this.problems.mismatch(versions.notification ?? versions.text, versions.fixCommand);
    } else this.log(versions.text);
    this.problems.running();
    void vscode.commands.executeCommand('setContext', Contexts.serverRunning, true);
    await this.refresh();
  }

  private log(text: string): void {
    this.output.info(`[client] ${text}`);
  }
}
