/**
 * Wire models of the Taguru HTTP contract (http_contract 1).
 *
 * Fields keep their snake_case wire names. Every enum-like field is `Open<…>`:
 * the known literals give editor completion and narrowing, and any newer value a
 * server sends still type-checks and passes through untouched (no runtime
 * validation is done on responses).
 */

/** A string union that stays open to values newer than this client. */
export type Open<T extends string> = T | (string & {});

// ---------------------------------------------------------------------------
// Envelopes and errors
// ---------------------------------------------------------------------------

export type ErrorCode = Open<
  | "malformed_request"
  | "invalid_argument"
  | "over_limit"
  | "unauthorized"
  | "forbidden"
  | "read_only_replica"
  | "no_context"
  | "no_source"
  | "no_paragraph"
  | "no_group"
  | "no_schema"
  | "unknown_path"
  | "method_not_allowed"
  | "timeout"
  | "already_exists"
  | "conflict"
  | "stale_cursor"
  | "payload_too_large"
  | "rate_limited"
  | "internal"
  | "embeddings_unconfigured"
  | "embeddings_failed"
  | "shard_unreachable"
  | "overloaded"
  | "unhealthy"
  | "maintenance"
  | "storage_full"
>;

export type IssueKind = Open<
  "missing" | "type" | "empty" | "too_long" | "range" | "over_limit" | "unknown_reference" | "conflict" | "domain"
>;

export type Integrity = Open<"nothing_written" | "durable_prefix">;

export interface Issue {
  path: string;
  kind: IssueKind;
  expected: string;
  actual: string;
}

/** `{"result": …, "status": "ok", "time": …}` */
export interface SuccessEnvelope<T> {
  result: T;
  status: "ok";
  time: number;
  issues?: Issue[];
  schema_violations?: number;
}

/** `{"status": "error", "code": …, "error": …, "time": …}` plus optional extras. */
export interface ErrorEnvelope {
  status: "error";
  code: ErrorCode;
  error: string;
  time: number;
  issues?: Issue[];
  issues_total?: number;
  integrity?: Integrity;
  durable_batches?: number;
  retryable_after_correction?: boolean;
}

// ---------------------------------------------------------------------------
// Probes
// ---------------------------------------------------------------------------

export interface ContractVersions {
  current: number;
  supported: number[];
}

export interface VersionInfo {
  server: string;
  http_contract: ContractVersions;
  mcp_contract?: ContractVersions;
  mcp_protocol?: { supported: string[] };
  batch_formats?: number[];
  schema_formats?: number[];
  image_formats?: number[];
  communities_formats?: number[];
}

export interface HealthInfo {
  status: Open<"ok">;
  version: string;
}

// ---------------------------------------------------------------------------
// Shared read shapes
// ---------------------------------------------------------------------------

export interface Locator {
  kind: string;
  value: string;
}

export interface LanePlan {
  ran: boolean;
  reason?: string;
  floor?: number;
}

export interface Attribution {
  source: string;
  weight: number;
  count: number;
  paragraph?: number | null;
  section?: string | null;
  locator?: Locator | null;
}

/** AssociationOut: an edge with its averaged weight and per-source attributions. */
export interface Association {
  subject: string;
  label: string;
  object: string;
  weight: number;
  count: number;
  attributions: Attribution[];
}

export interface LaneEvidence {
  rank: number;
  score: number;
}

export interface PassageHit {
  source: string;
  paragraph: number;
  score: number;
  text: string;
  lanes: { bm25?: LaneEvidence; vector?: LaneEvidence };
}

export interface CommunityMember {
  name: string;
  strength: number;
}

export interface CommunityHit {
  community: string;
  score: number;
  text: string;
  paragraph: number;
  level?: number;
  parent?: string;
  concept_count?: number;
  members?: CommunityMember[];
  members_truncated?: boolean;
}

export interface Citation {
  text: string;
  source: string;
  section: string | null;
  locator: Locator | null;
}

// ---------------------------------------------------------------------------
// Evidence package (POST /contexts/{name}/evidence)
// ---------------------------------------------------------------------------

export type Kind = Open<"association" | "passage" | "community">;

export type LaneName = Open<
  "graph_query" | "graph_activate" | "passage_bm25" | "passage_vector" | "passage_fused" | "community"
>;

export type OmitReason = Open<"duplicate_passage" | "budget_exceeded" | "contradiction_group_exceeds_budget">;

export type RerankerReason = Open<
  | "not_configured"
  | "model_mismatch"
  | "empty_pool"
  | "invalid_permutation"
  | "circuit_open"
  | "timeout"
  | "provider_error"
>;

export interface CitationRef {
  source: string;
  paragraph: number;
}

export interface LaneRank {
  lane: LaneName;
  rank: number;
}

export interface Corroboration {
  sources: string[];
  attributions: CitationRef[];
}

export interface EvidenceItem {
  candidate_id: string;
  kind: Kind;
  fused_rank: number;
  lane_ranks: LaneRank[];
  citation_refs: CitationRef[];
  corroboration?: Corroboration;
  contradicts?: string[];
  bytes: number;
  estimated_tokens: number;
  /** Exactly one of `association` / `passage` / `community` is present, per `kind`. */
  association?: Association;
  passage?: PassageHit;
  community?: CommunityHit;
}

export interface CitationEntry {
  source: string;
  paragraph: number;
  citation: Citation;
}

export interface BudgetLimits {
  max_items: number;
  max_bytes: number;
  max_tokens: number;
}

export interface BudgetUsage {
  items_used: number;
  bytes_used: number;
  tokens_used: number;
  limits: BudgetLimits;
}

export interface OmittedCandidate {
  candidate_id: string;
  kind: Kind;
  reason: OmitReason;
  /** Only for `duplicate_passage`. */
  duplicate_of?: string;
}

export type EvidenceLane = "resolve" | "query" | "activate" | "passages" | "communities" | "citations";

export interface SelectionPlan {
  dedup_dropped: number;
  contradiction_groups: number;
  diversity_tier_width: number;
}

export interface RerankerPlan {
  configured: boolean;
  ran: boolean;
  model?: string;
  reason?: RerankerReason;
}

export interface EvidencePlan {
  lanes: Record<EvidenceLane, LanePlan>;
  selection: SelectionPlan;
  reranker: RerankerPlan;
}

export interface EvidencePackage {
  items: EvidenceItem[];
  citations: CitationEntry[];
  budget: BudgetUsage;
  omitted: OmittedCandidate[];
  omitted_total: number;
  omitted_by_reason: Record<string, number>;
  plan: EvidencePlan;
}

export interface BudgetRequest {
  max_items?: number;
  max_bytes?: number;
  max_tokens?: number;
}

export interface RerankRequest {
  model?: string;
}

/** Body of POST /contexts/{name}/evidence. A bare string `origins`/`labels` is sent as a one-element list. */
export interface EvidenceRequest {
  origins: string | string[];
  labels?: string | string[];
  dice_floor?: number;
  semantic_floor?: number;
  resolve_limit?: number;
  activate_decay?: number;
  activate_limit?: number;
  text_fallback_query?: string;
  search_limit?: number;
  include_communities?: boolean;
  budget?: BudgetRequest;
  rerank?: RerankRequest;
}

// ---------------------------------------------------------------------------
// Contexts
// ---------------------------------------------------------------------------

export interface CreateContextOptions {
  description?: string;
  pinned?: boolean;
  dice_floor?: number;
  semantic_floor?: number;
}

export interface LabelCount {
  label: string;
  count: number;
}

export interface ContextStats {
  associations: number;
  concepts: number;
  labels: number;
  sources: number;
  footprint_bytes: number;
  dead_edges: number;
  dead_attributions: number;
  arena_slack: number;
  unsourced_edges: number;
  unsourced_weight: number;
  top_concepts: LabelCount[];
  label_sample: string[];
}

export interface ContextUsage {
  reads: number;
  empty_reads: number;
  writes: number;
  last_read_epoch: number;
  last_write_epoch: number;
}

export type SchemaMode = Open<"off" | "warn" | "strict">;

/** One entry of GET /contexts, and the result of GET /contexts/{name}. */
export interface ContextEntry {
  name: string;
  description: string;
  pinned: boolean;
  loaded: boolean;
  dice_floor?: number | null;
  semantic_floor?: number | null;
  stats: ContextStats;
  usage: ContextUsage;
  revision?: { graph: number; passages: number; config: number };
  schema_mode?: SchemaMode | null;
}

export interface ContextList {
  total: number;
  contexts: ContextEntry[];
}

export interface ListContextsOptions {
  limit?: number;
  after?: string;
  pinned?: boolean;
}

// ---------------------------------------------------------------------------
// Ingest
// ---------------------------------------------------------------------------

export interface AssociationInput {
  subject: string;
  label: string;
  object: string;
  weight: number;
  source?: string;
  paragraph?: number;
}

export interface ParagraphQuestion {
  paragraph: number;
  question: string;
}

export interface ParagraphSection {
  paragraph: number;
  section: string;
}

export interface ParagraphLocator {
  paragraph: number;
  locator: Locator;
}

export interface StorePassagesOptions {
  questions?: Record<string, ParagraphQuestion[]>;
  sections?: Record<string, ParagraphSection[]>;
  locators?: Record<string, ParagraphLocator[]>;
  tags?: Record<string, string[]>;
  dates?: Record<string, number>;
}

export interface StorePassagesResult {
  stored: number;
  questions_stored: number;
  questions_dropped: number;
  sections_stored: number;
  sections_dropped: number;
  locators_stored: number;
  locators_dropped: number;
}

export interface AliasMap {
  concepts?: Record<string, string>;
  labels?: Record<string, string>;
}

export interface AliasRemoval {
  concepts?: string[];
  labels?: string[];
}

export interface AliasList {
  total: number;
  concepts: Record<string, string>;
  labels: Record<string, string>;
}

/**
 * One structured import batch: one source's complete truth in one context
 * (serialized by `importBatches` into the JSONL format, header first).
 */
export interface ImportBatch {
  context: string;
  source: string;
  create?: CreateContextOptions;
  passage?: { text: string; stored_at?: number; date?: number; tags?: string[] };
  associations?: { subject: string; label: string; object: string; weight: number; paragraph?: number }[];
  aliases?: { alias: string; canonical: string; kind: Open<"concept" | "label"> }[];
  questions?: ParagraphQuestion[];
  sections?: ParagraphSection[];
  locators?: ParagraphLocator[];
}

export interface ImportOutcome {
  context: string;
  source: string;
  created: boolean;
  retracted: number;
  associations: number;
  aliases: number;
  passage_stored: boolean;
  passage_dropped: boolean;
  questions_stored: number;
  questions_dropped: number;
  sections_stored: number;
  sections_dropped: number;
  locators_stored: number;
  locators_dropped: number;
  association_paragraphs_dropped: number;
  schema_violations: number;
}

export interface ImportResult {
  batches: ImportOutcome[];
  schemas?: unknown[];
  groups?: unknown[];
}

export interface ImportOptions {
  dry_run?: boolean;
}

// ---------------------------------------------------------------------------
// Read lanes
// ---------------------------------------------------------------------------

export type ResolveTier = Open<"lexical" | "semantic">;
export type ResolveKind = Open<"exact" | "alias" | "containment" | "fuzzy">;

export interface ResolveCandidate {
  name: string;
  score: number;
  tier: ResolveTier;
  kind?: ResolveKind;
  gloss?: string;
  types?: string[];
}

export interface ResolveOptions {
  dice_floor?: number;
  semantic_floor?: number;
  limit?: number;
}

/** Keyset cursor of query/recall: the last row of the previous page. */
export interface QueryCursor {
  weight: number;
  subject: string;
  label: string;
  object: string;
}

export interface QueryRequest {
  subject?: string | string[];
  label?: string | string[];
  object?: string | string[];
  subject_types?: string | string[];
  object_types?: string | string[];
  limit?: number;
  after?: QueryCursor;
  since?: number;
  until?: number;
}

export interface QueryResult {
  total: number;
  matches: Association[];
  plan?: { contexts: string[] };
}

export interface RecallOptions {
  limit?: number;
  after?: QueryCursor;
}

export interface ActivateOptions {
  decay?: number;
  limit?: number;
  since?: number;
  until?: number;
}

export interface ActivationMatch {
  strength: number;
  path: string[];
  association: Association;
}

export interface ActivateResult {
  total: number;
  matches: ActivationMatch[];
}

export interface Description {
  concept: string;
  as_subject: LabelCount[];
  as_object: LabelCount[];
}

export interface SearchPassagesOptions {
  limit?: number;
  semantic_floor?: number;
  tags?: string[];
  since?: number;
  until?: number;
}

export interface SearchPlanContext {
  context: string;
  lanes: { bm25: LanePlan; vector: LanePlan };
  filter?: { eligible_sources: number; total_sources: number };
}

export interface PassageSearchResult {
  plan: { contexts: SearchPlanContext[] };
  hits: PassageHit[];
}

export interface SearchCommunitiesOptions {
  limit?: number;
  semantic_floor?: number;
  derived?: string;
}

export interface CommunitySearchResult {
  derived: string;
  algorithm: string;
  stale: boolean;
  revision: { recorded_graph: number; current_graph: number };
  plan: { contexts: SearchPlanContext[] };
  hits: CommunityHit[];
}
