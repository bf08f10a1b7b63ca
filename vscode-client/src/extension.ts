// aoti-lens VS Code extension: starts the Python language server and shows what it reports.
// Thin on purpose: the server discovers, reproduces and minifies; this file wires VS Code to it.
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
  type LanguageClientOptions,
  type ServerOptions,
} from 'vscode-languageclient/node';
import { FailuresView } from './failuresView';
import { probeInterpreter, probeProblem, installCommand, resolveInterpreter, type Interpreter } from './interpreter';
import { candidatesFor, commandArguments, pickLabel, statusText } from './presentation';
import { ClientCommands, Contexts, NAME, VIEW_ID } from './manifest';
import { Methods, ServerCommands, UNTRUSTED_TEXT, type FailureItem, type FailureList, type Settings } from './protocol';
import { buildSettings, type Vars } from './settings';

let controller: Controller | undefined;

/**
 * vscode-languageclient pops its own "couldn't create connection" / "connection closed" errors on
 * top of ours; the controller shows one actionable notification per problem, so the client's own
 * errors only go to the output channel.
 */
class AotiLanguageClient extends LanguageClient {
  override error(message: string, data?: unknown): void {
    super.error(message, data, false);
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  controller = new Controller(context);
  await controller.activate();
}

export async function deactivate(): Promise<void> {
  await controller?.stopClient();
  controller = undefined;
}

interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath?(resource?: vscode.Uri): { path: string } | undefined;
    resolveEnvironment?(env: unknown): Promise<{ executable?: { uri?: vscode.Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
  settings?: { getExecutionDetails?(resource?: vscode.Uri): { execCommand?: string[] } };
}

class Controller {
  private readonly output: vscode.LogOutputChannel;
  private readonly view = new FailuresView();
  private readonly status: vscode.StatusBarItem;
  private client: LanguageClient | undefined;
  private interpreter: Interpreter | undefined;
  private starting: Promise<void> | undefined;
  private pythonListener: vscode.Disposable | undefined;
  private problemShown = false; // one notification per start attempt, never a loop
  private stderrTail: string[] = []; // the server's last stderr lines, for the "it exited" message

  constructor(private readonly context: vscode.ExtensionContext) {
    this.output = vscode.window.createOutputChannel(NAME, { log: true });
    this.status = vscode.window.createStatusBarItem('aoti-lens.jobs', vscode.StatusBarAlignment.Left, 50);
    this.status.name = 'aoti-lens jobs';
    this.status.command = ClientCommands.cancelRunning;
  }

  async activate(): Promise<void> {
    const ctx = this.context;
    ctx.subscriptions.push(
      this.output,
      this.status,
      vscode.window.createTreeView(VIEW_ID, { treeDataProvider: this.view, showCollapseAll: false }),
      vscode.commands.registerCommand(ClientCommands.cancelRunning, () => this.cancelRunning()),
      vscode.commands.registerCommand(ClientCommands.refresh, () => this.refresh()),
      vscode.commands.registerCommand(ClientCommands.restart, () => this.restart()),
      vscode.commands.registerCommand(ClientCommands.showOutput, () => this.output.show(true)),
      vscode.workspace.onDidChangeConfiguration((e) => this.onConfigurationChanged(e)),
      vscode.workspace.onDidGrantWorkspaceTrust(() => this.onTrustGranted()),
      { dispose: () => this.pythonListener?.dispose() },
    );
    this.showTrustNotice();
    void this.restart(); // activation does not wait for the interpreter probe and the server
  }

  // ---- settings ------------------------------------------------------------------------------

  private vars(): Vars {
    const folder = vscode.workspace.workspaceFolders?.[0];
    return { workspaceFolder: folder?.uri.fsPath, home: os.homedir() };
  }

  private settings(): Settings {
    return buildSettings(vscode.workspace.getConfiguration('aoti'), this.interpreter?.command, vscode.workspace.isTrusted, this.vars());
  }

  private sendSettings(): void {
    const client = this.client;
    if (!client || client.state !== State.Running) return;
    client
      .sendNotification(DidChangeConfigurationNotification.type, { settings: { aoti: this.settings() } })
      .catch((e) => this.log(`didChangeConfiguration failed: ${String(e)}`));
  }

  private onConfigurationChanged(e: vscode.ConfigurationChangeEvent): void {
    if (e.affectsConfiguration('aoti.python')) {
      void this.restart();
    } else if (e.affectsConfiguration('aoti')) {
      this.sendSettings();
    }
  }

  private onTrustGranted(): void {
    this.showTrustNotice();
    // aoti.python is a restricted setting: a workspace value only counts once trusted.
    const inspected = vscode.workspace.getConfiguration('aoti').inspect<string>('python');
    if (inspected?.workspaceValue || inspected?.workspaceFolderValue) void this.restart();
    else this.sendSettings();
  }

  private showTrustNotice(): void {
    if (vscode.workspace.isTrusted) {
      this.view.setNotice(null, 'trust');
      return;
    }
    this.view.setNotice({
      key: 'trust',
      label: 'Restricted Mode: nothing runs',
      detail: 'trust the workspace to reproduce and minify',
      icon: 'shield',
      command: { title: 'Manage Workspace Trust', command: 'workbench.trust.manage' },
    });
  }

  // ---- interpreter -----------------------------------------------------------------------------

  private async pythonFromExtension(): Promise<string | undefined> {
    const ext = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
    if (!ext) return undefined;
    const api = ext.isActive ? ext.exports : await ext.activate();
    const resource = vscode.workspace.workspaceFolders?.[0]?.uri;
    if (!this.pythonListener && api?.environments?.onDidChangeActiveEnvironmentPath) {
      this.pythonListener = api.environments.onDidChangeActiveEnvironmentPath(() => {
        if (this.interpreter?.source !== 'setting') void this.restart();
      });
    }
    const envs = api?.environments;
    if (envs?.getActiveEnvironmentPath) {
      const active = envs.getActiveEnvironmentPath(resource);
      const resolved = active && envs.resolveEnvironment ? await envs.resolveEnvironment(active) : undefined;
      return resolved?.executable?.uri?.fsPath ?? active?.path;
    }
    return api?.settings?.getExecutionDetails?.(resource)?.execCommand?.[0];
  }

  // ---- client lifecycle -----------------------------------------------------------------------

  async restart(): Promise<void> {
    // Serialize: a restart waits for a start in progress instead of racing it.
    const previous = this.starting;
    const run = (async () => {
      await previous?.catch(() => undefined);
      await this.stopClient();
      await this.startClient();
    })();
    this.starting = run;
    return run;
  }

  async stopClient(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    void vscode.commands.executeCommand('setContext', Contexts.serverRunning, false);
    if (client) {
      try {
        if (client.state !== State.Stopped) await client.stop(5000);
      } catch (e) {
        this.log(`stopping the server: ${String(e)}`);
      }
    }
  }

  private serverDown(reason: string): void {
    this.view.setNotice({
      key: 'server',
      label: 'Language server not running',
      detail: reason,
      icon: 'debug-disconnect',
      command: { title: 'Show server log', command: ClientCommands.showOutput },
    });
    this.updateFailures({ failures: [] });
  }

  private async startClient(): Promise<void> {
    this.problemShown = false;
    const cfg = vscode.workspace.getConfiguration('aoti');
    this.interpreter = await resolveInterpreter(cfg.get<string>('python'), () => this.pythonFromExtension(), this.vars());
    const python = this.interpreter.command;
    const cwd = this.context.extensionPath; // neutral: `-m server` / `-c` put the cwd on sys.path
    this.log(`interpreter: ${python} (from ${this.interpreter.source})`);

    const probe = await probeInterpreter(python, cwd);
    const problem = probeProblem(python, probe);
    if (problem) {
      this.log(problem);
      this.serverDown(`${python}: ${probe.status === 'no-server' ? 'aoti-lens not installed' : probe.detail}`);
      const fix = probe.status === 'no-server' ? installCommand(python, 'server') : undefined;
      void this.notifyProblem(problem, fix);
      return; // no retry loop: the user fixes the interpreter, a settings change restarts
    }
    this.log(`${probe.executable} (Python ${probe.version}): server ok, torch ${probe.torch ? 'found' : 'missing'}`);
    if (!probe.torch) {
      void vscode.window
        .showWarningMessage(
          `aoti-lens: ${python} has no torch: failures are listed, but reproducing and minifying need torch in this interpreter (${installCommand(python, 'torch')}).`,
          'Open Settings',
        )
        .then((choice) => choice && vscode.commands.executeCommand('workbench.action.openSettings', 'aoti.python'));
    }

    const serverOptions: ServerOptions = {
      command: python,
      args: ['-m', 'server'],
      transport: TransportKind.stdio, // the client appends --stdio
      options: { cwd, env: { ...process.env, PYTHONUNBUFFERED: '1' } },
    };
    this.stderrTail = [];
    const logLines = (input: NodeJS.ReadableStream, level: 'info' | 'error') =>
      readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on('line', (line) => {
        this.stderrTail = [...this.stderrTail.slice(-19), line];
        this.output[level](line);
      });
    const clientOptions: LanguageClientOptions = {
      stdioOptions: { stdout: (input) => logLines(input, 'info'), stderr: (input) => logLines(input, 'info') },
      documentSelector: [
        { scheme: 'file', language: 'python' },
        { scheme: 'file', language: 'cpp' },
        { scheme: 'aoti' },
      ],
      outputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: this.settings(),
      initializationFailedHandler: (error) => {
        this.log(`initialize failed: ${String(error)}`);
        return false; // do not retry
      },
      errorHandler: {
        error: (error, _message, count) => {
          this.log(`connection error (${count ?? 0}): ${String(error)}`);
          return { action: (count ?? 0) <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown, handled: true };
        },
        closed: () => {
          const last = this.stderrTail.filter((l) => l.trim()).slice(-1)[0];
          this.serverDown(last ? `exited: ${last}` : 'the server process exited');
          // A crash after a good start may be worth a restart; a start that failed would fail again.
          void this.notifyProblem(
            `aoti-lens: the language server (${python} -m server) exited${last ? `: ${last.slice(0, 300)}` : ''}. See the output channel "${NAME}".`,
            undefined,
            client.state === State.Running,
          );
          return { action: CloseAction.DoNotRestart, handled: true };
        },
      },
      middleware: {
        executeCommand: (command, args, next) => this.executeServerCommand(command, args, next),
        workspace: {
          configuration: async (params, token, next) => {
            const result = await next(params, token);
            if (!Array.isArray(result)) return result;
            return result.map((value, i) => {
              const section = params.items[i]?.section;
              if (section === 'aoti') return this.settings();
              if (!section) return { ...(value ?? {}), aoti: this.settings() };
              return value;
            });
          },
        },
      },
    };

    const client = new AotiLanguageClient(NAME, NAME, serverOptions, clientOptions);
    this.client = client;
    client.onNotification(Methods.failuresChanged, (list: FailureList) => this.updateFailures(list));
    try {
      await client.start();
    } catch (e) {
      if (this.client === client) this.client = undefined;
      const text = e instanceof Error ? e.message : String(e);
      this.log(`start failed: ${text}`);
      this.serverDown(text);
      void this.notifyProblem(`aoti-lens: the language server did not start with ${python}: ${text}`);
      try {
        await client.dispose(2000);
      } catch {
        /* already down */
      }
      return;
    }
    this.view.setNotice(null, 'server');
    void vscode.commands.executeCommand('setContext', Contexts.serverRunning, true);
    await this.refresh();
  }

  private async notifyProblem(text: string, fixCommand?: string, offerRestart = false): Promise<void> {
    if (this.problemShown) return;
    this.problemShown = true;
    const buttons = [...(fixCommand ? ['Copy Command'] : []), ...(offerRestart ? ['Restart'] : []), 'Open Settings', 'Show Log'];
    const choice = await vscode.window.showErrorMessage(text, ...buttons);
    if (choice === 'Copy Command' && fixCommand) await vscode.env.clipboard.writeText(fixCommand);
    else if (choice === 'Restart') await this.restart();
    else if (choice === 'Open Settings') await vscode.commands.executeCommand('workbench.action.openSettings', 'aoti.python');
    else if (choice === 'Show Log') this.output.show(true);
  }

  // ---- failures, commands, status ------------------------------------------------------------

  private updateFailures(list: FailureList | undefined): void {
    this.view.update(list?.failures ?? []);
    const status = statusText(this.view.failures);
    void vscode.commands.executeCommand('setContext', Contexts.jobsRunning, status !== null);
    if (status) {
      this.status.text = status.text;
      this.status.tooltip = status.tooltip;
      this.status.show();
    } else {
      this.status.hide();
    }
  }

  async refresh(): Promise<void> {
    const client = this.client;
    if (!client || client.state !== State.Running) return;
    try {
      this.updateFailures(await client.sendRequest<FailureList>(Methods.failures, {}));
    } catch (e) {
      this.log(`${Methods.failures} failed: ${String(e)}`);
    }
  }

  private async pickFailure(command: string): Promise<FailureItem | undefined> {
    const candidates = candidatesFor(command, this.view.failures);
    if (candidates.length === 0) {
      void vscode.window.showInformationMessage('aoti-lens: no AOTI failure to apply this to.');
      return undefined;
    }
    if (candidates.length === 1) return candidates[0];
    const picked = await vscode.window.showQuickPick(
      candidates.map((f) => ({ ...pickLabel(f), failure: f })),
      { placeHolder: 'Which AOTI failure?' },
    );
    return picked?.failure;
  }

  private async executeServerCommand(command: string, args: unknown[], next: (command: string, args: unknown[]) => unknown): Promise<unknown> {
    let sendArgs = commandArguments(command, args);
    if (sendArgs === null) {
      const failure = await this.pickFailure(command);
      if (!failure) return undefined;
      sendArgs = [failure.id];
    }
    if (!vscode.workspace.isTrusted && (command === ServerCommands.minify || command === ServerCommands.reproduce)) {
      const choice = await vscode.window.showWarningMessage(UNTRUSTED_TEXT, 'Manage Workspace Trust');
      if (choice) await vscode.commands.executeCommand('workbench.trust.manage');
      return undefined;
    }
    try {
      return await next(command, sendArgs);
    } catch (e) {
      const text = e instanceof Error ? e.message : String(e);
      this.log(`${command} failed: ${text}`);
      void vscode.window.showErrorMessage(`aoti-lens: ${command} failed: ${text}`);
      return undefined;
    }
  }

  private async cancelRunning(): Promise<void> {
    const running = candidatesFor(ServerCommands.cancel, this.view.failures);
    if (running.length === 0) {
      void vscode.window.showInformationMessage('aoti-lens: no job is running.');
      return;
    }
    const picked = await vscode.window.showQuickPick(
      running.map((f) => ({ ...pickLabel(f), label: `$(debug-stop) Cancel: ${f.label}`, failure: f })),
      { placeHolder: 'Cancel which aoti-lens job?' },
    );
    if (picked) await vscode.commands.executeCommand(ServerCommands.cancel, picked.failure.id);
  }

  private log(text: string): void {
    this.output.info(`[client] ${text}`);
  }
}
