export * from "./models.js";
export * from "./errors.js";
export {
  Taguru,
  encodeContextName,
  parseRetryAfter,
  serializeImport,
  SUPPORTED_HTTP_CONTRACTS,
  DEFAULT_BASE_URL,
} from "./client.js";
export type { TaguruOptions, RequestOptions } from "./client.js";
