// A VM's state as the service reports it (a Sandbox's status.state). Apart from the schemas, so
// that the operator and the exec command read it without loading them.

/**
 * Whether a VM in this state still runs: not released, expired or gone. "gone" is the
 * operator's, in a Sandbox's status: the VM is no longer in the service and no replacement is
 * allocated yet.
 */
export function vmStateIsLive(state: string | undefined): boolean {
  return state !== "released" && state !== "expired" && state !== "terminated" && state !== "deleted" && state !== "gone";
}
