/** The CLI's second import, after tick-shape.ts (workers run the CLI too): V8's inlining budget for a gateway, before anything is optimized (inlining-budget.ts). */
import { raiseInliningBudget } from './inlining-budget.js'

raiseInliningBudget()
