// How the emulator stores each service object, and the wire view it answers with. Stored
// records keep what the service keeps but never sends (a pull secret's password, a VM's env,
// instants as numbers); views are built per response so stored records are never leaked.
import type {
  Agent,
  AgentVM,
  Allocation,
  Deployment,
  ImagePullSecret,
  Skill,
  UsageRecord,
} from "../service/types.js";
import { rfc3339 } from "./util.js";

export interface StoredAgent extends Agent {
  org_id: string;
  image: string;
  state: string;
  visibility: string;
  allowed_org_ids: string[];
  capabilities: string[];
  metadata: Record<string, string>;
  created_at: string;
  updated_at: string;
  /** Stored in full; the password is never sent back. */
  image_pull_secret?: ImagePullSecret;
}

export interface StoredDeployment extends Deployment {
  state: string;
  endpoint: string;
  endpoint_name: string;
  token: string;
  created_at: string;
  updated_at: string;
  /** Emulator extra: bumped by every redeploy. */
  revision: number;
  /** Emulator extra: the agent's image at deploy/redeploy time. */
  agent_image: string;
}

export interface StoredVM {
  vm_id: string;
  state: string;
  tier: string;
  org_id: string;
  skills_loaded: string[];
  metadata: Record<string, string>;
  env: Record<string, string>;
  secure_runtime: boolean;
  endpoint: string;
  ws_url: string;
  token: string;
  ttl_seconds: number;
  allocatedAt: number;
  expiresAt: number;
}

export interface StoredSkill extends Skill {
  name: string;
  content: string;
  resources: Record<string, string>;
  content_hash: string;
  created_at: string;
  updated_at: string;
}

/** The agent as the registry answers it: everything but the pull secret's password. */
export function agentView(a: StoredAgent): Agent & { image_pull_secret?: Omit<ImagePullSecret, "password"> } {
  const { image_pull_secret, ...rest } = a;
  const view: Agent & { image_pull_secret?: Omit<ImagePullSecret, "password"> } = {
    ...rest,
    capabilities: [...a.capabilities],
    metadata: { ...a.metadata },
    allowed_org_ids: [...a.allowed_org_ids],
  };
  if (image_pull_secret) view.image_pull_secret = { registry: image_pull_secret.registry, username: image_pull_secret.username };
  return view;
}

export function deploymentView(d: StoredDeployment): Deployment {
  return structuredClone(d);
}

/** AgentVM view: connection details but not the token (only allocate hands that out) nor env. */
export function vmView(vm: StoredVM, releasedAt?: number): AgentVM {
  const view: AgentVM = {
    vm_id: vm.vm_id,
    state: vm.state,
    tier: vm.tier,
    org_id: vm.org_id,
    skills_loaded: [...vm.skills_loaded],
    metadata: { ...vm.metadata },
    secure_runtime: vm.secure_runtime,
    endpoint: vm.endpoint,
    ws_url: vm.ws_url,
    ttl_seconds: vm.ttl_seconds,
    allocated_at: rfc3339(vm.allocatedAt),
    expires_at: rfc3339(vm.expiresAt),
  };
  if (releasedAt !== undefined) view.released_at = rfc3339(releasedAt);
  return view;
}

export function allocationView(vm: StoredVM): Allocation {
  return {
    vm_id: vm.vm_id,
    state: vm.state,
    tier: vm.tier,
    skills_loaded: [...vm.skills_loaded],
    endpoint: vm.endpoint,
    ws_url: vm.ws_url,
    token: vm.token,
    expires_at: rfc3339(vm.expiresAt),
  };
}

export function skillView(s: StoredSkill): Skill {
  return { ...s, resources: { ...s.resources } };
}

export const usageView = (u: UsageRecord): UsageRecord => ({ ...u });

/** Everything a state file holds; `version` lets a later format refuse an old file clearly. */
export interface PersistedState {
  version: 1;
  agents: StoredAgent[];
  deployments: StoredDeployment[];
  vms: StoredVM[];
  skills: StoredSkill[];
  usage: UsageRecord[];
  tokens: { token: string; expiresAt: number }[];
}
