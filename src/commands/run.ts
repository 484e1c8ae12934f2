// Placeholder until the operator core lands: keeps the CLI's command table honest.
export async function main(_argv: string[]): Promise<number> {
  console.error("agent-operator run: the operator is not built yet");
  return 1;
}
