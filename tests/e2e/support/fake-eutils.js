/**
 * A fake NCBI E-utilities server (`backends.pubmed.base_url = http://127.0.0.1:PORT/entrez/eutils`)
 * so `search_pubmed` runs for real — esearch, efetch, parsing, citations — without leaving the
 * machine. It answers `esearch.fcgi` (JSON with `retmode=json`, else XML) with the PMIDs of its articles and `efetch.fcgi` with a
 * minimal PubmedArticleSet built from them, and records every request.
 */

import http from "node:http";

/**
 * @typedef {object} FakeArticle
 * @property {string} pmid
 * @property {string} title
 * @property {string} journal
 * @property {string} year
 * @property {string} abstract
 */

/** @param {string} s */
const xml = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

/** @param {FakeArticle} a */
function articleXml(a) {
  return `<PubmedArticle><MedlineCitation Status="MEDLINE" Owner="NLM"><PMID Version="1">${a.pmid}</PMID>
<Article PubModel="Print"><Journal><JournalIssue CitedMedium="Internet"><PubDate><Year>${a.year}</Year></PubDate></JournalIssue>
<Title>${xml(a.journal)}</Title></Journal><ArticleTitle>${xml(a.title)}</ArticleTitle>
<Abstract><AbstractText>${xml(a.abstract)}</AbstractText></Abstract>
<AuthorList CompleteYN="Y"><Author ValidYN="Y"><LastName>Doe</LastName><ForeName>Jane</ForeName><Initials>J</Initials></Author></AuthorList>
</Article></MedlineCitation><PubmedData><ArticleIdList><ArticleId IdType="pubmed">${a.pmid}</ArticleId></ArticleIdList></PubmedData></PubmedArticle>`;
}

export class FakeEutils {
  /** @param {FakeArticle[]} articles */
  constructor(articles) {
    this.articles = articles;
    /** @type {URL[]} */
    this.requests = [];
  }

  /** @returns {Promise<string>} the base URL to configure */
  async start() {
    this.server = http.createServer((req, res) => this.handle(req, res));
    await new Promise((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    const { port } = /** @type {import("node:net").AddressInfo} */ (this.server.address());
    this.baseUrl = `http://127.0.0.1:${port}/entrez/eutils`;
    return this.baseUrl;
  }

  async stop() {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }

  /**
   * @param {import("node:http").IncomingMessage} req
   * @param {import("node:http").ServerResponse} res
   */
  handle(req, res) {
    const url = new URL(req.url || "/", "http://127.0.0.1");
    this.requests.push(url);
    if (url.pathname.endsWith("/esearch.fcgi")) {
      const ids = this.articles.map((a) => a.pmid);
      if (url.searchParams.get("retmode") === "json") {
        const body = {
          header: { type: "esearch", version: "0.3" },
          esearchresult: { count: String(ids.length), retmax: String(ids.length), retstart: "0", idlist: ids },
        };
        res.writeHead(200, { "content-type": "application/json; charset=UTF-8" });
        res.end(JSON.stringify(body));
        return;
      }
      // E-utilities' default answer is XML.
      const idList = ids.map((pmid) => `<Id>${pmid}</Id>`).join("");
      res.writeHead(200, { "content-type": "text/xml; charset=UTF-8" });
      res.end(`<?xml version="1.0" encoding="UTF-8" ?>\n<!DOCTYPE eSearchResult>\n<eSearchResult><Count>${ids.length}</Count>`
        + `<RetMax>${ids.length}</RetMax><RetStart>0</RetStart><IdList>${idList}</IdList></eSearchResult>\n`);
      return;
    }
    if (url.pathname.endsWith("/efetch.fcgi")) {
      const wanted = new Set((url.searchParams.get("id") || "").split(","));
      const articles = this.articles.filter((a) => wanted.has(a.pmid)).map(articleXml).join("\n");
      res.writeHead(200, { "content-type": "text/xml; charset=UTF-8" });
      res.end(`<?xml version="1.0" ?>\n<!DOCTYPE PubmedArticleSet>\n<PubmedArticleSet>\n${articles}\n</PubmedArticleSet>\n`);
      return;
    }
    res.writeHead(404, { "content-type": "text/plain" });
    res.end("not found\n");
  }
}
