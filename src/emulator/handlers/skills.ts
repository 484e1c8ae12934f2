// Skill routes, keyed by name.
import { badRequest } from "../errors.js";
import type { HandlerContext, HandlerResult, Route } from "../router.js";
import { optionalString, optionalStringMap, rejectUnknown, requiredString } from "../validate.js";
import type { JsonObject, SkillRequest } from "../wire.js";

const FIELDS = new Set(["name", "content", "description", "resources"]);
// A skill's name becomes a directory on the VM (/workspace/skills/<name>/): keep it a plain
// path segment (D). Kubernetes object names (the operator's default) always fit.
const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/;

function skillBody(ctx: HandlerContext, body: JsonObject, name: string): SkillRequest {
  rejectUnknown(ctx.options.strictBodies, body, FIELDS);
  if (!NAME_RE.test(name)) throw badRequest("name must start with a letter or digit and contain only letters, digits, '.', '_' and '-'");
  const req: SkillRequest = { name, content: requiredString(body, "content") };
  const description = optionalString(body, "description");
  if (description !== undefined) req.description = description;
  const resources = optionalStringMap(body, "resources");
  if (resources !== undefined) {
    for (const file of Object.keys(resources)) {
      if (file === "" || file.startsWith("/") || file.split("/").some((seg) => seg === ".." || seg === "")) {
        throw badRequest(`resources: invalid file name "${file}"`);
      }
    }
    req.resources = resources;
  }
  return req;
}

function create(ctx: HandlerContext): HandlerResult {
  const body = ctx.body("models.CreateSkillRequest");
  const name = requiredString(body, "name");
  return { status: 201, body: ctx.state.createSkill(skillBody(ctx, body, name)) };
}

function replace(ctx: HandlerContext): HandlerResult {
  const name = ctx.params["name"]!;
  const body = ctx.body("models.CreateSkillRequest");
  // The body is models.CreateSkillRequest, as create's: name is required, and must be the
  // path's (a rename is not published) (D).
  if (requiredString(body, "name") !== name) throw badRequest("name must match the skill name in the path");
  return { status: 200, body: ctx.state.replaceSkill(name, skillBody(ctx, body, name)) };
}

export const skillRoutes: Route[] = [
  { method: "POST", pattern: "/compute/v1/skills", operation: "skills.create", auth: true, handler: create },
  // No query parameters are published: any limit/offset is ignored.
  { method: "GET", pattern: "/compute/v1/skills", operation: "skills.list", auth: true, handler: (ctx) => ({ status: 200, body: ctx.state.listSkills() }) },
  {
    method: "GET",
    pattern: "/compute/v1/skills/:name",
    operation: "skills.get",
    auth: true,
    handler: (ctx) => ({ status: 200, body: ctx.state.getSkill(ctx.params["name"]!) }),
  },
  { method: "PUT", pattern: "/compute/v1/skills/:name", operation: "skills.update", auth: true, handler: replace },
  {
    method: "DELETE",
    pattern: "/compute/v1/skills/:name",
    operation: "skills.delete",
    auth: true,
    handler: (ctx) => {
      ctx.state.deleteSkill(ctx.params["name"]!);
      return { status: 204 };
    },
  },
];
