// The resources a scenario creates: a credentials Secret and a Connection pointing at the
// benchmark's emulator, and a mix of the four managed kinds whose specs look like what
// people apply (a few hundred bytes each, with the dependencies GitOps brings: every
// AgentDeployment names an Agent, every Sandbox loads a Skill; all applied at once).
import { API_VERSION } from "../../src/api/index.js";
import type { Emulator } from "../../src/emulator/index.js";

export const API_KEY = "bench-api-key-7d41c9";
export const ORG_ID = "org-bench";

export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace: string; labels?: Record<string, string> };
  [k: string]: unknown;
}

export function connectionObjects(namespace: string, emulator: Emulator, rateLimit: number): Manifest[] {
  return [
    {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "agentcompute-credentials", namespace },
      type: "Opaque",
      stringData: { apiKey: API_KEY },
    },
    {
      apiVersion: API_VERSION,
      kind: "Connection",
      metadata: { name: "default", namespace },
      spec: {
        baseURL: emulator.baseURL,
        authURL: emulator.authURL,
        credentials: { secretRef: { name: "agentcompute-credentials" } },
        orgId: ORG_ID,
        workspaceId: "ws-bench",
        environmentId: "env-bench",
        // The client's sustained rate is the service's; its burst stays under the service's
        // (one second's worth) so a full bucket never meets a 429.
        rateLimit: { qps: rateLimit, burst: Math.max(1, Math.floor(rateLimit / 2)) },
      },
    },
  ];
}

export interface Mix {
  skills: number;
  agents: number;
  deployments: number;
  sandboxes: number;
}

/** 20 % Skills, 40 % Agents, 20 % AgentDeployments, 20 % Sandboxes (rounding goes to Agents). */
export function mixOf(total: number): Mix {
  const skills = Math.floor(total * 0.2);
  const deployments = Math.floor(total * 0.2);
  const sandboxes = Math.floor(total * 0.2);
  return { skills, agents: total - skills - deployments - sandboxes, deployments, sandboxes };
}

const pad = (i: number): string => String(i).padStart(5, "0");

export function skill(namespace: string, i: number): Manifest {
  return {
    apiVersion: API_VERSION,
    kind: "Skill",
    metadata: { name: `sk-${pad(i)}`, namespace },
    spec: {
      description: `Benchmark skill ${i}: looks things up and summarises them.`,
      content: `# Skill ${i}\n\nWhen asked a question, search the knowledge base first, then answer in three sentences.\n`,
      resources: { "requirements.txt": "requests==2.32.3\n" },
    },
  };
}

export function agent(namespace: string, i: number): Manifest {
  return {
    apiVersion: API_VERSION,
    kind: "Agent",
    metadata: { name: `ag-${pad(i)}`, namespace },
    spec: {
      image: `ghcr.io/acme/bench-agent-${i % 50}:1.${i % 7}.0`,
      description: `Benchmark agent ${i}`,
      version: `1.${i % 7}.0`,
      capabilities: ["triage", "search"],
      metadata: { team: `team-${i % 20}`, tier: "standard" },
    },
  };
}

export function deployment(namespace: string, i: number, agentIndex: number): Manifest {
  return {
    apiVersion: API_VERSION,
    kind: "AgentDeployment",
    metadata: { name: `agd-${pad(i)}`, namespace },
    spec: {
      agentRef: { name: `ag-${pad(agentIndex)}` },
      tier: "standard",
      env: { LOG_LEVEL: "info" },
    },
  };
}

export function sandbox(namespace: string, i: number, opts: { skillIndex?: number; ttlSeconds?: number } = {}): Manifest {
  const spec: Record<string, unknown> = { tier: "standard", env: { MODE: "bench" } };
  if (opts.skillIndex !== undefined) spec.skills = [`sk-${pad(opts.skillIndex)}`];
  if (opts.ttlSeconds !== undefined) spec.ttlSeconds = opts.ttlSeconds;
  return { apiVersion: API_VERSION, kind: "Sandbox", metadata: { name: `sbx-${pad(i)}`, namespace }, spec };
}

/** The cold-start mix, in the order a GitOps tool would apply it (kinds interleaved does not matter: all land before the operator starts). */
export function mixedResources(namespace: string, total: number): { mix: Mix; objects: Manifest[] } {
  const mix = mixOf(total);
  const objects: Manifest[] = [];
  for (let i = 0; i < mix.skills; i++) objects.push(skill(namespace, i));
  for (let i = 0; i < mix.agents; i++) objects.push(agent(namespace, i));
  for (let i = 0; i < mix.deployments; i++) objects.push(deployment(namespace, i, i % mix.agents));
  for (let i = 0; i < mix.sandboxes; i++) {
    objects.push(sandbox(namespace, i, mix.skills > 0 ? { skillIndex: i % mix.skills } : {}));
  }
  return { mix, objects };
}
