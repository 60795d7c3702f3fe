import { join } from 'node:path'
import fastifyStatic from '@fastify/static'
import type { FastifyPluginAsync } from 'fastify'
import { projectRoot } from '../../lib/project-root.js'

/** The folder of the page's files: the sources, also when this runs compiled from dist-dev/. */
export const PORTAL_PAGE_ROOT = join(projectRoot, 'dev', 'portal')

/** What the page is made of; nothing else of the folder (this file) is served. */
export const PORTAL_PAGE_FILES = ['index.html', 'portal.js', 'portal.css'] as const

/**
 * The reference portal page under `/portal/`: static HTML, CSS and JS with no inline script, so it
 * runs under the service's content security policy. Development only: `npm start` serves it.
 */
const portalPage: FastifyPluginAsync = async (fastify) => {
  await fastify.register(fastifyStatic, { root: PORTAL_PAGE_ROOT, serve: false })
  // The page's links are relative to its folder; the query (`?api=`) goes along.
  fastify.get('/portal', { schema: { hide: true } }, (request, reply) => {
    const query = request.url.indexOf('?')
    return reply.redirect(`/portal/${query === -1 ? '' : request.url.slice(query)}`)
  })
  // `no-cache`: the browser asks again, so an edit shows on the next reload.
  for (const file of PORTAL_PAGE_FILES) {
    const url = file === 'index.html' ? '/portal/' : `/portal/${file}`
    fastify.get(url, { schema: { hide: true } }, (_request, reply) => reply.header('cache-control', 'no-cache').sendFile(file, { cacheControl: false }))
  }
}

export default portalPage
