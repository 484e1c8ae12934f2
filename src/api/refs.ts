// References from a spec to Secrets and ConfigMaps of the same namespace.
import { Type } from "./schema.js";

const name = Type.String({ description: "Name of the object, in the same namespace.", minLength: 1, maxLength: 253 });
const key = (description: string) => Type.String({ description, minLength: 1, maxLength: 253 });

export const SecretReference = (description: string) => Type.Object({ name }, { description });

export const ConfigMapKeySelector = Type.Object(
  { name, key: key("Key in the ConfigMap's data.") },
  { description: "A key of a ConfigMap in the same namespace." },
);

export const ConfigMapReference = Type.Object(
  { name },
  { description: "A ConfigMap in the same namespace; each key becomes one file." },
);
