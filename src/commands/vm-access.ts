// How the CLI reaches a VM's agentd as the operator does: the Connection and its credentials
// Secret read from the cluster with the caller's kubeconfig, the operator's own ConnectionPool
// built over those two objects, and an AgentdClient for the VM through the service. Used by
// `exec` (a Sandbox's VM) and `logs` (the VM a run's step runs in).
import type { Connection } from "../api/index.js";
import { DEFAULT_CONNECTION, GROUP, VERSION, kindNames } from "../api/names.js";
import { ConnectionPool } from "../controllers/connection-pool.js";
import { errorMessage } from "../lib/errors.js";
import type { SecretObject } from "../managed/connection-secret.js";
import { NotReadyError } from "../managed/errors.js";
import type { Informer } from "../runtime/informer.js";
import { KubeApiError, resourcePath, secretsPath, type KubeClient } from "../runtime/kube-client.js";
import { silentLogger } from "../runtime/logging.js";
import { AgentdClient } from "../service/agentd.js";
import { isAuthError, type ServiceClient } from "../service/index.js";

/** The VM could not be reached, for a reason the message says. */
export class VMAccessError extends Error {
  override readonly name = "VMAccessError";
  constructor(
    message: string,
    /** A failure that may pass (the API server or the token service not answering), not a refusal or a thing missing. */
    readonly transient = false,
  ) {
    super(message);
  }
}

/** A failure of the API server's, told with which server and kubeconfig (explainKubeError). */
export type Explain = (err: unknown) => unknown;

export interface VMAccess {
  vm: AgentdClient;
  /** The VM's id, to name it in what is said. */
  vmId: string;
  close(): Promise<void>;
}

export interface Reader {
  kube: KubeClient;
  explain: Explain;
  /** What the command needs to be granted, for a 401/403: e.g. "get on sandboxes, connections and the Connection's Secret". */
  needs: string;
}

/**
 * GET; undefined for 404; a one-line VMAccessError naming the object otherwise (a kind the
 * API server does not serve, a refusal with what the command needs, a server not reached).
 */
export async function readObject<T>(r: Reader, path: string, what: string): Promise<T | undefined> {
  try {
    return await r.kube.get<T>(path);
  } catch (err) {
    if (err instanceof KubeApiError && err.status === 404) {
      // An object that is not there names itself in the answer; a kind the server does not serve does not.
      if (err.details?.name !== undefined) return undefined;
      throw new VMAccessError(`cannot read ${what}: the API server does not serve that kind (are the agentcompute.dev CRDs installed?)`);
    }
    if (err instanceof KubeApiError && (err.status === 401 || err.status === 403)) {
      throw new VMAccessError(`cannot read ${what}: ${err.message} (this needs ${r.needs})`);
    }
    throw new VMAccessError(`cannot read ${what}: ${errorMessage(r.explain(err))}`, !(err instanceof KubeApiError) || err.status === 429 || err.status >= 500);
  }
}

/**
 * A client of VM `vmId`'s agentd through Connection `connectionRef` of `namespace` (the
 * default Connection when none is named), its credentials checked first so that a refusal is
 * a clear one-liner. `what` names the resource the VM is for, in messages.
 */
export async function connectVM(r: Reader, namespace: string, connectionRef: { name?: string } | undefined, vmId: string, what: string): Promise<VMAccess> {
  const connectionName = connectionRef?.name ?? DEFAULT_CONNECTION;
  const connection = await readObject<Connection>(
    r,
    resourcePath({ group: GROUP, version: VERSION, plural: kindNames.connection.plural, namespace, name: connectionName }),
    `Connection "${connectionName}" in namespace "${namespace}"`,
  );
  const secretName = connection?.spec.credentials.secretRef.name;
  const secret = secretName === undefined ? undefined : await readObject<SecretObject>(r, secretsPath(namespace, secretName), `Secret "${secretName}" in namespace "${namespace}"`);

  // The operator's own construction of a client from a Connection and its Secret (and its
  // messages for what is missing), over the two objects just read.
  const pool = new ConnectionPool({
    connections: lookup(connection),
    secrets: lookup(secret),
    logger: silentLogger(),
    inventoryMaxAgeMs: 3_600_000,
  });
  let client: ServiceClient;
  try {
    client = pool.forResource(namespace, connectionRef).client;
  } catch (err) {
    await pool.close();
    if (err instanceof NotReadyError) throw new VMAccessError(`${what}: ${err.message}`);
    throw err;
  }
  const spec = connection!.spec;
  const vm = new AgentdClient({
    baseURL: spec.baseURL,
    vmId,
    accessToken: (refused) => client.accessToken(refused),
    insecureSkipTLSVerify: spec.insecureSkipTLSVerify ?? false,
    ...(spec.timeoutSeconds !== undefined && { timeoutMs: spec.timeoutSeconds * 1000 }),
  });
  const close = async () => {
    await vm.close();
    await pool.close();
  };
  try {
    await client.accessToken();
  } catch (err) {
    await close();
    if (isAuthError(err)) {
      throw new VMAccessError(`Connection "${connectionName}" in namespace "${namespace}": ${errorMessage(err)}; check the credentials in Secret "${secretName ?? ""}"`);
    }
    throw new VMAccessError(`Connection "${connectionName}" in namespace "${namespace}": ${errorMessage(err)}`, true);
  }
  return { vm, vmId, close };
}

/** The one-object "informer" ConnectionPool reads (get by namespace and name). */
function lookup<T extends { metadata: { name?: string; namespace?: string } }>(obj: T | undefined): Informer<T & { metadata: { name: string } }> {
  const get = (namespace: string | undefined, name: string) => (obj !== undefined && obj.metadata.namespace === namespace && obj.metadata.name === name ? obj : undefined);
  return { get } as unknown as Informer<T & { metadata: { name: string } }>;
}
