"""The operator console (docs/design.md §19): server-rendered pages under ``/console``, off
unless ``console.enabled``. Every page stands on a JSON route the gateway offers anyway
(``surfaces/operator/inventory.py`` and the approval routes); here are the sign-in, the session,
the guards every page has (CSP, CSRF, same-origin posts, a rate limit) and the
templates."""
