{#- Cover of the print page and the PDF (mkdocs-print-site-plugin's cover_page_template; globals: config, page). -#}
<div class="print-cover">
  <h1>{{ config.site_name }}</h1>
  <p class="print-cover__description">{{ config.site_description }}</p>
  <p class="print-cover__edition">第 {{ config.extra.version }} 版</p>
  <p class="print-cover__note">本 PDF 由网站生成，包含首页、十章正文与附录；各章的 notebook 与 API 参考请在网站上阅读。</p>
  <p class="print-cover__copyright">{{ config.copyright }}</p>
</div>
