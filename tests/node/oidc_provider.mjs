// A real, certified OpenID provider (panva's oidc-provider) on loopback, for the
// connection tests (tests/browser). Its own login and consent pages (the development
// interactions: any login name is the account, any password) are driven in Chromium.
//
// Configured by one JSON argument: {port, clients, access_token_ttl, resources}.
// - clients: oidc-provider client metadata, as given;
// - access_token_ttl: seconds an access token lives (short ones test refreshes);
// - resources: resource indicators (RFC 8707) it issues JWT access tokens for, each
//   {url, scope} (an MCP server's URL, for the MCP authorization tests).
// Beside the standard grants it answers RFC 8693 token exchange for one subject token
// type, an ID token it issued itself (verified against its own keys), as providers
// that support token exchange do for their own tokens.
// It prints one line, "ready <issuer>", once it listens.

import { createServer } from 'node:http';
import Provider, { errors } from 'oidc-provider';
import { createLocalJWKSet, exportJWK, generateKeyPair, jwtVerify } from 'jose';

const settings = JSON.parse(process.argv[2]);
const issuer = `http://127.0.0.1:${settings.port}`;
const EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ID_TOKEN = 'urn:ietf:params:oauth:token-type:id_token';
const ACCESS = 'urn:ietf:params:oauth:token-type:access_token';

const { privateKey } = await generateKeyPair('RS256', { extractable: true });
const signing = { ...(await exportJWK(privateKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
const { d, p, q, dp, dq, qi, ...publicKey } = signing;
const ownKeys = createLocalJWKSet({ keys: [publicKey] });
const resources = new Map((settings.resources || []).map((r) => [r.url, r]));

const provider = new Provider(issuer, {
  clients: settings.clients,
  jwks: { keys: [signing] },
  findAccount: async (ctx, id) => ({
    accountId: id,
    claims: async () => ({ sub: id }),
  }),
  scopes: ['openid', 'offline_access', 'tickets', 'tickets:read'],
  features: {
    devInteractions: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (ctx, client, oneOf) => oneOf,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, indicator) => {
        const found = resources.get(indicator);
        if (!found) throw new errors.InvalidTarget();
        return { scope: found.scope, audience: indicator, accessTokenFormat: 'jwt' };
      },
    },
  },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  ttl: {
    AccessToken: settings.access_token_ttl || 600,
    ClientCredentials: 600,
    IdToken: 3600,
    RefreshToken: 86400,
    Grant: 86400,
    Interaction: 600,
    Session: 86400,
  },
  pkce: { required: () => true },
});

// RFC 8693: the subject token is an ID token this provider issued (to any of its
// clients); the answer is an access token of the requesting client, for that account.
provider.registerGrantType(
  EXCHANGE,
  async (ctx) => {
    const { params, client } = ctx.oidc;
    if (params.subject_token_type !== ID_TOKEN) {
      throw new errors.InvalidRequest('unsupported subject_token_type');
    }
    if (params.requested_token_type && params.requested_token_type !== ACCESS) {
      throw new errors.InvalidRequest('unsupported requested_token_type');
    }
    let payload;
    try {
      ({ payload } = await jwtVerify(params.subject_token, ownKeys, { issuer }));
    } catch {
      throw new errors.InvalidGrant('the subject token is not one of this provider\'s');
    }
    const scope = (params.scope || '').split(' ').filter((s) => s === 'tickets' || s === 'openid');
    const token = new provider.AccessToken({
      accountId: payload.sub,
      client,
      scope: scope.join(' ') || undefined,
      gty: 'token_exchange',
    });
    if (params.audience) token.aud = params.audience;
    const value = await token.save();
    ctx.body = {
      access_token: value,
      issued_token_type: ACCESS,
      token_type: 'Bearer',
      expires_in: token.expiration,
      scope: token.scope,
    };
  },
  ['subject_token', 'subject_token_type', 'requested_token_type', 'audience', 'scope'],
);

provider.proxy = false;
const server = createServer(provider.callback());
server.listen(settings.port, '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
