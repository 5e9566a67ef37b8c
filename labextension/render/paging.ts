/**
 * Long lists (the sidebar's jobs, the Runs view's runs) draw their first rows and a
 * "Show more" button: drawing 1,000 rows takes seconds, the first page well under one.
 */

/** Rows drawn at first, and added by each "Show more". */
export const ROWS_PAGE = 100;

/** The "Show more" button's text when `more` rows are not drawn. */
export function showMoreLabel(more: number): string {
  return `Show ${Math.min(more, ROWS_PAGE)} more (${more} not shown)`;
}
