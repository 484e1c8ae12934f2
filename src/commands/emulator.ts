export async function main(_argv: string[]): Promise<number> {
  console.error("agent-operator emulator: not built yet");
  return 1;
}
