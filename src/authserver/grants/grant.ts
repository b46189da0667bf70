/** A grant type is one module: its name, the parameters it reads, and `handle` (STYLE §5). */
import type { GrantType } from '../../config/schema.js'
import type { VerifiedProof } from '../../dpop/proof.js'
import type { RegisteredClient } from '../registered-client.js'
import type { AuthServerContext } from '../context.js'
import type { Form } from '../http.js'
import type { TokenResponseBody } from '../tokens.js'

export interface GrantRequest {
  readonly form: Form
  /** Already authenticated (or identified, for public clients) and registered for this grant. */
  readonly client: RegisteredClient
  /** The caller's address, for throttling. */
  readonly ip: string
  /**
   * The audience the token request asks for: its RFC 8707 resources, each one a client may ask for
   * (resource.ts), or undefined when it names none. The grant decides which it may have (a grant's own
   * resources, RFC 8707 §2.2) and what `aud` is without them.
   */
  readonly audience?: readonly string[] | undefined
  /**
   * The request's DPoP proof (RFC 9449), verified and spent by the token endpoint; undefined without one.
   * The access token is bound to its key, and so are a public client's refresh tokens (tokens.ts).
   */
  readonly dpop?: VerifiedProof | undefined
  readonly ctx: AuthServerContext
}

export interface GrantHandler {
  readonly grantType: GrantType
  /** The form parameters the grant reads besides grant_type and client authentication. */
  readonly parameters: readonly string[]
  handle(request: GrantRequest): Promise<TokenResponseBody>
}
