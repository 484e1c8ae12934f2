// The User-Agent of the operator's calls to the service. In sharded mode every client says which
// replica it is (`agent-operator/service-client (replica <id>)`), so the service's logs tell the
// replicas apart; one process is one replica, hence process-wide.

let replicaSuffix = "";

/** Every client made from now on names this replica; unset: the plain User-Agent. */
export function setServiceReplica(identity: string | undefined): void {
  replicaSuffix = identity ? ` (replica ${identity.replace(/[^\x21-\x7e]/g, "-")})` : "";
}

/** `product` (e.g. "agent-operator/service-client"), with the replica if one was set. */
export function userAgent(product: string): string {
  return product + replicaSuffix;
}
