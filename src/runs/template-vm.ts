// The VM of a run with spec.sandboxTemplate: allocated for the run (carrying the run's uid as
// its marker, as every object the operator creates does), renewed while the run runs, given
// back when the run ends or is deleted. A VM allocated just before a crash (its id never
// reached status) is found by its marker and adopted rather than allocated again, and given
// back with the run.
import { API_VERSION, DEFAULT_CONNECTION, kindNames } from "../api/names.js";
import type { Sandbox, SandboxRun, SandboxRunSpec, SandboxRunStatus } from "../api/index.js";
import type { ServiceHandle } from "../controllers/connection-pool.js";
import { desiredAllocation, envFromValues, holdsRotatedSecrets, renewAtOf, renewVMFor, ttlSeconds, vmGoneIndeed, vmLookup, type SandboxDeps } from "../controllers/sandbox.js";
import { removeObject } from "../controllers/marker.js";
import { formatTime } from "../runtime/status.js";
import { ServiceError, isServiceNotFound, type AllocateVMRequest } from "../service/index.js";
import type { AgentVM } from "../service/types.js";
import { vmStateIsLive } from "../api/vm-state.js";

/** What allocating needs of a Sandbox's dependencies: the Secrets (envFrom) and Skills to wait for. */
export type AllocationDeps = Pick<SandboxDeps, "store" | "skills" | "now">;

/**
 * The Connection a run holds: with a template, the one its VM is allocated and given back
 * through, until it is given back (a deleting Connection waits for it, as for a Sandbox). A
 * sandboxRef run holds none: its Sandbox does.
 */
export function heldConnection(run: { spec?: Pick<SandboxRunSpec, "sandboxTemplate">; status?: Pick<SandboxRunStatus, "vmReleased"> }): string | undefined {
  const template = run.spec?.sandboxTemplate;
  if (template === undefined || run.status?.vmReleased === true) return undefined;
  return template.connectionRef?.name ?? DEFAULT_CONNECTION;
}

/** Extra life given to a run's VM beyond activeDeadlineSeconds. */
const TTL_MARGIN_SECONDS = 300;

/**
 * The template as a Sandbox of the run's own metadata (its uid is the VM's marker). For the
 * allocation, `lengthened`: asked to live as long as the run may, so that a run with a deadline
 * needs no renewal (see keepRunVM for the others). The template's ttlSeconds is there whether
 * the user wrote it or not (the CRD defaults it to 3600), so the deadline lengthens it rather
 * than stands in for it.
 */
function asSandbox(run: SandboxRun, opts: { lengthened: boolean }): Sandbox {
  const template = run.spec.sandboxTemplate!;
  const deadline = run.spec.activeDeadlineSeconds;
  const ttlSeconds = !opts.lengthened || deadline === undefined ? template.ttlSeconds : Math.max(template.ttlSeconds ?? 0, deadline + TTL_MARGIN_SECONDS);
  return {
    apiVersion: API_VERSION,
    kind: kindNames.sandbox.kind,
    metadata: run.metadata,
    spec: { ...template, ...(ttlSeconds !== undefined && { ttlSeconds }) },
  };
}

/**
 * The live VMs carrying the run's marker. A run moved in from another owner (sharding) is
 * looked up on a snapshot read since: that owner may have allocated its VM just before.
 * `fresh`: on a list read now, not a snapshot read since the last stale mark (the look for what
 * an allocation of unknown outcome made, which may have landed after the snapshot was read).
 */
async function liveVMsOf(run: SandboxRun, handle: ServiceHandle, { fresh = false } = {}): Promise<string[]> {
  await (fresh ? handle.vms.refresh() : handle.vms.ensureFresh());
  await handle.vms.readSinceArrival(run.metadata.uid);
  return handle.vms.findByMarker(run.metadata.uid).filter((v) => vmStateIsLive(v.state)).map((v) => v.id);
}

/**
 * The run's live VM found by its marker, else a new one; its id. Not `lost` (one an attempt
 * found gone, which a lagging list may still show), nor one past its expiry.
 */
export async function ensureRunVM(run: SandboxRun, handle: ServiceHandle, deps: AllocationDeps, lost?: string): Promise<string> {
  const now = deps.now().getTime();
  const usable = (id: string): boolean => id !== lost && !(Date.parse(handle.vms.get(id)?.expires_at ?? "") <= now);
  const [own] = (await liveVMsOf(run, handle)).filter(usable);
  if (own !== undefined) return own;
  const sandbox = asSandbox(run, { lengthened: true });
  const request = desiredAllocation(sandbox, handle, deps);
  try {
    const vm = await allocateWithin(handle, request, run.spec.sandboxTemplate?.ttlSeconds, envFromValues(sandbox, deps.store));
    // Recorded in the snapshot, so a retry before status holds the id finds it by marker.
    handle.vms.put({ id: vm.vm_id, state: vm.state, tier: vm.tier, ...(request.metadata && { metadata: request.metadata }), ...(vm.expires_at && { expires_at: vm.expires_at }) });
    return vm.vm_id;
  } catch (err) {
    // An answer lost on the way back may still have allocated one: look again before retrying.
    handle.vms.invalidate();
    throw err;
  }
}

/**
 * The run's own VM holds values of its template's envFrom Secrets from before they changed
 * (allocated, then the Secret rotated before the first step started): a step could print them,
 * and the run could not mask them.
 */
export function runVMHoldsRotatedSecrets(run: SandboxRun, vm: { metadata?: Record<string, string> }, store: SandboxDeps["store"]): boolean {
  return holdsRotatedSecrets(asSandbox(run, { lengthened: false }), vm, store);
}

/**
 * Allocates; a TTL lengthened for the deadline that the service refuses (its bounds are not
 * published: a pool may cap it) is asked for again at the template's own, the run then having
 * that long before its VM runs out. Any other refusal is refused again, and stands.
 */
async function allocateWithin(handle: ServiceHandle, request: AllocateVMRequest, templateTTL: number | undefined, secretValues: string[]) {
  try {
    return await handle.client.vms.allocate(request, secretValues);
  } catch (err) {
    const lengthened = templateTTL !== undefined && (request.ttl_seconds ?? 0) > templateTTL;
    if (!lengthened || !(err instanceof ServiceError) || err.status !== 400) throw err;
    return handle.client.vms.allocate({ ...request, ttl_seconds: templateTTL }, secretValues);
  }
}

/**
 * A run's VM (its own, or its Sandbox's) as the Connection's snapshot lists it, else as the
 * service answers for it, kept in the snapshot; undefined when the service says it has no such
 * VM (its own 404: a bare one, a gateway's, is thrown, as any failure) or that it has ended
 * (released, expired: as findOwn counts VMs). The list holds only the
 * Connection's org's VMs, and a replica may not have listed them since another allocated it: a
 * VM of a template with another orgId is never in it, and must still be found.
 */
export async function knownVM(handle: ServiceHandle, vmId: string): Promise<AgentVM | undefined> {
  const listed = handle.vms.get(vmId);
  if (listed !== undefined) return vmStateIsLive(listed.state) ? listed : undefined;
  try {
    const vm = await handle.client.vms.get(vmId);
    handle.vms.put(vm);
    return vmStateIsLive(vm.state) ? vm : undefined;
  } catch (err) {
    if (!isServiceNotFound(err)) throw err;
    handle.vms.remove(vmId);
    return undefined;
  }
}

/**
 * Renews the run's VM if its renewal is due, as a Sandbox's is (renewBeforeSeconds of the
 * template before it runs out), with the template's own ttlSeconds: the one the service
 * accepted at allocation, lengthened or not, and never shorter than what is left by then.
 * When the next renewal is due (ms since the epoch); undefined when there is nothing to renew:
 * `keepAlive: false` in the template, or the VM's expiry not known (neither the snapshot, read
 * again, nor the service's answer for it says it) or the VM gone (the service's 404 for it, or
 * renew's 404; dropped from the snapshot), which the step's next look finds out.
 */
export async function keepRunVM(run: SandboxRun, handle: ServiceHandle, vmId: string, now: () => number): Promise<number | undefined> {
  if (run.spec.sandboxTemplate?.keepAlive === false) return undefined;
  // The window is the template's own TTL's (what a renewal asks for), not the one lengthened
  // for a deadline: a fifth of a day-long TTL would be longer than the renewal gives.
  const template = asSandbox(run, { lengthened: false });
  let vm = handle.vms.get(vmId);
  if (vm?.expires_at === undefined) {
    await handle.vms.ensureFresh(); // a restarted operator's snapshot may not be read yet
    vm = await knownVM(handle, vmId);
  }
  const expiresAt = Date.parse(vm?.expires_at ?? "");
  if (vm === undefined || Number.isNaN(expiresAt)) return undefined;
  // The window of the TTL it is renewed with: the template's, or the VM's own where that is
  // shorter (the service refused the template's: below).
  const own = vm.ttl_seconds;
  const dueAt = renewAtOf(template, vmId, expiresAt, Math.min(ttlSeconds(template), own ?? Infinity));
  if (now() < dueAt) return dueAt;
  let renewed;
  let ttl;
  try {
    // Refused for the template's TTL (a pool's max_vm_ttl_seconds lowered since): renewed with
    // a shorter one the service takes, rather than lost mid-run.
    ({ renewed, ttl } = await renewVMFor(handle, vm, ttlSeconds(template)));
  } catch (err) {
    if (!(await vmGoneIndeed(handle, vmId, err))) throw err;
    handle.vms.remove(vmId);
    return undefined;
  }
  const at = now();
  const next = Date.parse(renewed.expires_at ?? "") || at + ttl * 1000;
  handle.vms.put({ ...vm, state: renewed.state, ttl_seconds: renewed.ttl_seconds ?? ttl, expires_at: renewed.expires_at ?? formatTime(new Date(next)) });
  // Never due again at once, whatever the service answered: no renewal loop.
  return Math.max(renewAtOf(template, vmId, next, ttl), at + 1_000);
}

/**
 * Gives back `vmId` and any other VM carrying the run's marker (release or delete, per the
 * template); `fresh`: found on a list read now (liveVMsOf).
 */
export async function releaseRunVMs(run: SandboxRun, handle: ServiceHandle, vmId: string | undefined, opts: { fresh?: boolean } = {}): Promise<void> {
  const template = run.spec.sandboxTemplate;
  if (template === undefined) return;
  const ids = new Set(await liveVMsOf(run, handle, opts));
  if (vmId) ids.add(vmId);
  const vms = handle.client.vms;
  const giveBack = (id: string) => ((template.onDelete ?? "Release") === "Delete" ? vms.delete(id) : vms.release(id, template.recycle ?? false));
  // As a Sandbox's: a bare 404 (a gateway's) is success only once a GET says the VM is gone.
  for (const id of ids) await removeObject(handle.vms, id, giveBack, vmLookup(handle));
}
