// The page query parameters every list takes; the tokens themselves are lib/page-token.ts.
import { Type } from "@sinclair/typebox";

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 200;

export const PageQuery = {
  page_size: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: MAX_PAGE_SIZE,
      description: `Rows per page; default ${DEFAULT_PAGE_SIZE}, at most ${MAX_PAGE_SIZE}.`,
    }),
  ),
  page_token: Type.Optional(
    Type.String({
      maxLength: 512,
      description: "next_page_token of the previous page; empty or omitted for the first page.",
    }),
  ),
};
